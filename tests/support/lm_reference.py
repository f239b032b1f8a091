"""The `lm` policy's batch-1 generation as it was before the generation loop
(app/local/policies/lm/batching.py): one turn alone, a full prefill of its prompt, its forced
runs fed in one forward pass each. The batched loop's turns are checked against it
(tests/local/policies/test_lm_batching.py): the same seed gives the same ids, chosen flags and
logprobs within float tolerance."""

from __future__ import annotations

from typing import Any

import torch
import xgrammar as xgr

from app.local.policies.lm.acting import _Call, sampling_entropy


def batch_one_turn(policy: Any, prompt: list[int], grammar: Any, seed: int | None,
                   call: _Call) -> tuple[list[int], list[float], list[int], float]:
    """(ids, logprobs, chosen, entropy sum) of one turn, as the policy generated it alone."""
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    model = policy.model
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return _sample_completion(policy, prompt, grammar, generator, call)
    finally:
        model.train(was_training)


def _sample_completion(policy: Any, prompt: list[int], grammar: Any, generator: torch.Generator | None,
                       call: _Call) -> tuple[list[int], list[float], list[int], float]:
    model = policy.model
    device = policy.loaded.device
    matcher = xgr.GrammarMatcher(grammar) if grammar is not None else None
    bitmask = xgr.allocate_token_bitmask(1, policy._info.vocab_size) if matcher is not None else None
    out = model(input_ids=torch.tensor([prompt], device=device), use_cache=True)
    cache, last = out.cache, out.logits[0, -1]
    ids: list[int] = []
    logprobs: list[float] = []
    chosen: list[int] = []
    entropy = 0.0
    while len(ids) < call.max_tokens:
        forced = policy._forced(matcher, call.max_tokens - len(ids))
        if forced:
            out = model(input_ids=torch.tensor([forced], device=device), cache=cache, use_cache=True)
            before = torch.cat([last.unsqueeze(0), out.logits[0, :-1]])
            scores = torch.log_softmax(policy._scaled(before, call), -1)
            logprobs += [float(scores[pos, token]) for pos, token in enumerate(forced)]
            ids += forced
            chosen += [0] * len(forced)
            cache, last = out.cache, out.logits[0, -1]
            continue
        row = policy._scaled(last, call)
        drawn_from = row
        choice = 1
        if matcher is not None and bitmask is not None:
            matcher.fill_next_token_bitmask(bitmask)
            masked = row.clone().unsqueeze(0)
            xgr.apply_token_bitmask_inplace(masked, bitmask.to(masked.device))
            choice = int(torch.isfinite(masked[0]).sum() > 1)
            drawn_from = masked[0]
            token = policy._sample(drawn_from, generator, call)
            if not matcher.accept_token(token):
                break
        else:
            token = policy._sample(row, generator, call)
        if choice and call.temperature > 0.0 and generator is not None:
            entropy += sampling_entropy(drawn_from, call.top_p)
        logprobs.append(float(torch.log_softmax(row, -1)[token]))
        ids.append(token)
        chosen.append(choice)
        if token in policy.eos_ids or len(ids) >= call.max_tokens:
            break
        if matcher is not None and matcher.is_terminated():
            break  # its stop token taken (one the policy's end-of-turn ids do not hold)
        out = model(input_ids=torch.tensor([[token]], device=device), cache=cache, use_cache=True)
        cache, last = out.cache, out.logits[0, -1]
    return ids, logprobs, chosen, entropy
