"""The command line's words: every command and its flags (docs/product.md#commands), and
``synth-tui [flags]`` read as ``synth-tui train [flags]``. It imports no front end and no
backend: every command's start waits for it, and ``synth-tui serve`` checks a tab's words with
it before anything starts."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from app import __version__

# What the embedded backend trains (app.local.policies.POLICY_KINDS; not imported here: the
# parser must not load the backend).
POLICY_KINDS = ("auto", "lm", "tabular")

COMMANDS = ("train", "demo", "attach", "history", "jobs", "compare", "rollouts", "backend", "taskapp", "tiny-model",
            "serve", "ranks-host", "lab")
# The press task app's buttons (app.local.taskapps.press.LABELS; not imported here: the parser
# must not load the backend).
PRESS_LABELS = ("A", "B", "C", "D")
GIVE_UP_HELP = ("stop watching when a backend that answered before has not answered for S seconds: exit 5 "
                "(default 60; 0 waits until --poll-timeout)")


def _add_train_flags(parser: argparse.ArgumentParser) -> None:
    """Every flag of the SDK's ``train`` (docs/wire-contract.md#train-flags), plus --backend, --no-tui, --metric."""
    add = parser.add_argument
    add("--config", action="append", default=[], metavar="PATH",
        help="RL config TOML (repeatable; several open the picker)")
    add("--type", dest="train_type", default="auto", choices=["auto", "rl", "sft", "prompt_learning"],
        help="training type (only rl is supported; auto infers it from the config)")
    add("--env-file", action="append", default=[], metavar="PATH",
        help=".env with SYNTH_API_KEY, ENVIRONMENT_API_KEY, TASK_APP_URL (the first is used)")
    add("--task-url", metavar="URL", help="task app URL (overrides TASK_APP_URL and the config)")
    add("--dataset", metavar="PATH", help=argparse.SUPPRESS)  # SFT only in the SDK
    add("--examples", type=int, metavar="N", help=argparse.SUPPRESS)  # SFT only in the SDK
    add("--backend", metavar="URL",
        help="backend base URL, http(s)://HOST[:PORT] (/api is appended), or `local`: the embedded backend in this "
             "process (it trains any conforming task app here; its jobs stop with the run)")
    add("--trainer", dest="policy_kind", choices=POLICY_KINDS, metavar="{auto,lm,tabular}",
        help="with --backend local: what the embedded backend trains: lm (the config's model, with TRL; needs "
             "pip install 'synth-tui[trainer]'), tabular (a fast stand-in) or auto (lm when it can, else the "
             "stand-in with a warning; the default). docs/embedded-policy.md")
    add("--model", metavar="ID", help="model to train instead of the config's [model]")
    add("--allow-experimental", dest="allow_experimental", action="store_true", default=None,
        help="allow experimental models (default: SDK_EXPERIMENTAL=1)")
    add("--no-allow-experimental", dest="allow_experimental", action="store_false")
    add("--idempotency", metavar="KEY", help="Idempotency-Key for job creation (default: a fresh UUID)")
    add("--dry-run", action="store_true",
        help="validate, verify and preview the payload without creating a job")
    add("--poll", dest="poll", action="store_true", default=True, help="watch the job after creating it (default)")
    add("--no-poll", dest="poll", action="store_false", help="create the job and exit")
    add("--poll-timeout", type=float, default=3600.0, metavar="S",
        help="stop watching (not the job) after S seconds (default 3600)")
    add("--poll-interval", type=float, default=5.0, metavar="S", help="seconds between polls (default 5)")
    add("--give-up-after", type=float, default=60.0, metavar="S",
        help=GIVE_UP_HELP)
    add("--stream-format", choices=["cli", "chart"], default="cli", help="headless output: lines or a chart")
    add("--metric", metavar="NAME", help="metric to chart (default: the job's mean score)")
    add("--no-tui", action="store_true", help="run headless: print the SDK's lines, no screens")
    add("--modal-secret", metavar="NAME",
        help="read ENVIRONMENT_API_KEY from this Modal secret (starts a short Modal container: a few seconds, "
             "a little compute; needs the modal CLI: pip install 'synth-tui[modal]')")
    add("--modal-app", metavar="APP[/FUNCTION]",
        help="TASK_APP_URL from this deployed Modal app's web endpoint (APP/FUNCTION when it has several)")


def _server_keys_epilog(keys: str) -> str:
    return (f"Keys come from the environment or from --env-file: {keys}. A variable set in the shell wins over "
            "the file; a key given as a flag wins over both, but every user of this machine can read flags with ps.")


def _add_server_env_file(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env-file", metavar="PATH",
                        help=".env to read the keys from; a variable set in the shell wins over the file")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line; ``only`` names the one command to add (main knows it from the first
    word): the others' flags are not built for nothing (about 6 ms of a TUI's first paint,
    docs/performance.md#first-paint). A parse gives the same result either way
    (tests/cli/test_cli_parser.py)."""

    parser = argparse.ArgumentParser(
        prog="synth-tui",
        description="Launch and watch RL training jobs on Synth or on an embedded backend on this machine.",
        epilog="Exit codes: 0 succeeded, 1 job failed/cancelled, 2 usage or invalid config, "
               "3 missing secrets or failed checks, 4 --poll-timeout reached, 5 backend error, "
               "6 job paused on the backend (the watch ended), 130 interrupted, 141 output closed (| head).",
    )
    parser.add_argument("--version", action="version", version=f"synth-tui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    adders = {"train": _add_train_parser, "demo": _add_demo_parser, "attach": _add_attach_parser,
              "history": _add_history_parser, "jobs": _add_jobs_parser, "compare": _add_compare_parser,
              "rollouts": _add_rollouts_parser, "serve": _add_serve_parser, "backend": _add_backend_parser,
              "taskapp": _add_taskapp_parser, "tiny-model": _add_tiny_model_parser, "lab": _add_lab_parser,
              "ranks-host": _add_ranks_host_parser}
    for command, add in adders.items():
        if only is None or only == command:
            add(sub)
    return parser


def _add_train_parser(sub: argparse._SubParsersAction) -> None:
    _add_train_flags(sub.add_parser("train", help="the guided session (default command)"))


def _add_history_parser(sub: argparse._SubParsersAction) -> None:
    history = sub.add_parser("history", help="jobs launched from this machine")
    history.add_argument("--env-file", action="append", default=[], metavar="PATH",
                         help=".env with SYNTH_API_KEY, used to attach or rerun")
    history.add_argument("--no-tui", action="store_true", help="print the history as a table")


def _add_demo_parser(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="embedded backend + reference task app + demo config, then the flow")
    demo.add_argument("--no-tui", action="store_true", help="run headless")
    demo.add_argument("--workdir", metavar="DIR",
                      help="folder for the demo .env (0600) and database, reused with the same keys on the next run "
                           "(default: demo/ in the state folder, $SYNTH_TUI_STATE_DIR or ~/.local/state/synth-tui); "
                           "while another demo holds it, this run uses a fresh private folder, removed with its "
                           "keys when the demo exits")
    demo.add_argument("--poll-interval", type=float, default=0.5, metavar="S")
    demo.add_argument("--poll-timeout", type=float, default=600.0, metavar="S")
    demo.add_argument("--stream-format", choices=["cli", "chart"], default="cli")


def _add_attach_parser(sub: argparse._SubParsersAction) -> None:
    attach = sub.add_parser("attach", help="the live dashboard for an existing job")
    attach.add_argument("job_id")
    attach.add_argument("--backend", metavar="URL")
    attach.add_argument("--env-file", action="append", default=[], metavar="PATH")
    attach.add_argument("--poll-interval", type=float, default=5.0, metavar="S")
    attach.add_argument("--poll-timeout", type=float, default=3600.0, metavar="S")
    attach.add_argument("--give-up-after", type=float, default=60.0, metavar="S",
                        help=GIVE_UP_HELP)
    attach.add_argument("--no-tui", action="store_true", help="print the SDK's lines instead of the dashboard")
    attach.add_argument("--stream-format", choices=["cli", "chart"], default="cli")
    attach.add_argument("--metric", metavar="NAME", help="metric to chart")


def _add_compare_parser(sub: argparse._SubParsersAction) -> None:
    compare = sub.add_parser("compare", help="the metrics of several jobs of one backend on one grid")
    compare.add_argument("job_ids", nargs="+", metavar="JOB_ID", help="two or more job ids; the first leads")
    compare.add_argument("--backend", metavar="URL")
    compare.add_argument("--env-file", action="append", default=[], metavar="PATH")
    compare.add_argument("--metric", metavar="NAME", help="the metric whose chart leads")
    compare.add_argument("--no-tui", action="store_true", help="print a table: per metric and job, last and best")


def _add_backend_parser(sub: argparse._SubParsersAction) -> None:
    backend = sub.add_parser("backend", help="run the embedded backend as a server", epilog=_server_keys_epilog(
        "SYNTH_API_KEY (the key clients must send), ENVIRONMENT_API_KEY and the comma-separated "
        "ENVIRONMENT_API_KEY_ALIASES (the task-app keys it holds)"))
    backend.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    backend.add_argument("--port", type=int, default=8000, help="port to listen on (default: %(default)s)")
    _add_server_env_file(backend)
    backend.add_argument("--api-key", metavar="KEY",
                         help="SYNTH_API_KEY clients must send (visible to every user via ps: prefer the "
                              "environment or --env-file)")
    backend.add_argument("--env-key", action="append", default=[], metavar="KEY",
                         help="an ENVIRONMENT_API_KEY the backend holds for verification (visible via ps: prefer "
                              "the environment or --env-file)")
    backend.add_argument("--db", metavar="PATH", help="SQLite state file (default: in the user's state folder)")
    backend.add_argument("--trainer", dest="policy_kind", choices=POLICY_KINDS, default="auto",
                         help="what jobs train: lm (the config's [model] base, with TRL; needs pip install "
                              "'synth-tui[trainer]'), tabular (a fast stand-in) or auto (lm when the trainer extra "
                              "is installed and the model is on this machine, else the stand-in with a warning; "
                              "default). docs/embedded-policy.md")
    backend.add_argument("--processes", type=_count(1, 4096), default=1, metavar="N",
                         help="with --trainer lm: train each job data-parallel in N processes launched through "
                              "`accelerate launch` (gloo on CPU; at most this machine's cores; default 1: in the "
                              "backend's own process). docs/design/data-parallel.md")
    backend.add_argument("--accelerate-config", metavar="FILE",
                         help="with --processes: the accelerate config file (YAML) to launch them with, instead of "
                              "the backend's own (one machine, CPU)")
    backend.add_argument("--vllm-server", metavar="URL",
                         help="with --trainer lm, on GPUs: generate through the `trl vllm-serve` at URL (the "
                              "weights are pushed to it after each step) instead of the model's own forward "
                              "passes. docs/scaling.md")
    backend.add_argument("--vllm-colocate", nargs="?", const=0.3, type=_fraction, metavar="FRACTION",
                         help="with --trainer lm, on a GPU with vllm installed: generate with vLLM inside the "
                              "trainer's process, sharing its GPU (TRL's vllm_mode colocate), vLLM taking FRACTION "
                              "of the GPU's memory (default 0.3, TRL's). docs/scaling.md")
    backend.add_argument("--shared-dir", metavar="DIR",
                         help="with an --accelerate-config of several machines (num_machines > 1): a folder on a "
                              "file system every machine mounts at the same path, where each job's folder goes for "
                              "the other machines' `synth-tui ranks-host`. docs/scaling.md#several-machines")
    # Bounds and defaults: app/local/training/admission.py (not imported here: the parser must not load the backend).
    backend.add_argument("--max-jobs", type=_count(1, 256), metavar="N",
                         help="jobs trained at once; the others wait, queued in order (default: this machine's "
                              "CPUs, from 2 to 16; `lm` jobs also one per device). docs/architecture.md#admission")
    backend.add_argument("--max-rollouts", type=_count(1, 4096), metavar="N",
                         help="rollouts in flight across all jobs, on top of each job's max_concurrent_rollouts "
                              "(default: 8 per job slot)")
    backend.add_argument("--infra-events", action="store_true",
                         help="also emit stand-ins for the hosted service's hatchet.* and rl.runtime.modal.* events "
                              "(off by default: here they describe nothing real)")


def _add_ranks_host_parser(sub: argparse._SubParsersAction) -> None:
    host = sub.add_parser("ranks-host", help="on each other machine of a multi-machine backend: start and stop "
                                             "that machine's ranks of every lm job",
                          description="Watches the backend's --shared-dir for jobs' folders and runs this machine's "
                                      "ranks of each (`accelerate launch` with this machine's machine_rank) until "
                                      "the job ends. Ctrl+C or SIGTERM stops it and its ranks. "
                                      "docs/scaling.md#several-machines")
    host.add_argument("--shared-dir", required=True, metavar="DIR",
                      help="the backend's --shared-dir, mounted at the same path on this machine")
    host.add_argument("--machine-rank", required=True, type=_count(1, 4095), metavar="K",
                      help="this machine's machine_rank in the accelerate config (1 to num_machines - 1)")
    host.add_argument("--host", metavar="ADDR",
                      help="the address this machine's ranks serve the backend on (default: this machine's address "
                           "on the route to the config's main_process_ip); a trusted network only: the calls are "
                           "plain HTTP, each carrying the job's token")


def _add_taskapp_parser(sub: argparse._SubParsersAction) -> None:
    taskapp = sub.add_parser("taskapp", help="run the reference task app as a server", epilog=_server_keys_epilog(
        "ENVIRONMENT_API_KEY and the comma-separated ENVIRONMENT_API_KEY_ALIASES (the keys callers must send)"))
    taskapp.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    taskapp.add_argument("--port", type=int, default=8102, help="port to listen on (default: %(default)s)")
    taskapp.add_argument("--game", choices=["gridworld", "crafter-lite", "press"], default="gridworld",
                         help="gridworld (a move tool), crafter-lite (an SDK-style app: an array-of-enum tool, "
                              "tool_choice, trace_ correlation ids) or press (\"Press C.\" → press(label=\"C\"): "
                              "for the lm policy, configs/rl/lm_press.toml)")
    taskapp.add_argument("--asks", type=_labels, metavar="LABELS",
                         help="with --game press: the buttons it asks for, e.g. A or A,C (default: all four, "
                              "A,B,C,D; the tool offers all four either way). The tiny model of `synth-tui "
                              "tiny-model` learns one button in a few steps, not to read the label")
    taskapp.add_argument("--contract", choices=["0.2", "0.5"], default="0.2",
                         help="rollout contract generation: 0.2 (synth-ai 0.2: run_id) or 0.5 (synth-ai 0.4/0.5: "
                              "trace_correlation_id, reward_info); docs/rollout-contracts.md")
    _add_server_env_file(taskapp)
    taskapp.add_argument("--env-key", action="append", default=[], metavar="KEY",
                         help="accepted ENVIRONMENT_API_KEY (visible to every user via ps: prefer the environment "
                              "or --env-file)")


def _add_lab_parser(sub: argparse._SubParsersAction) -> None:
    lab = sub.add_parser("lab", help="a task app and the embedded backend on free ports, their URLs written into the "
                                     ".env, then the flow (docs/product.md#lab)")
    _add_train_flags(lab)
    lab.add_argument("--game", choices=["gridworld", "crafter-lite", "press"], default="gridworld",
                     help="the task app, as `synth-tui taskapp --game` (default: %(default)s)")
    lab.add_argument("--asks", type=_labels, metavar="LABELS", help="with --game press: the buttons it asks for")
    lab.add_argument("--processes", type=_count(1, 4096), default=1, metavar="N",
                     help="train with the lm policy in N processes, data-parallel (as `synth-tui backend "
                          "--processes N`)")


def _add_tiny_model_parser(sub: argparse._SubParsersAction) -> None:
    tiny = sub.add_parser(
        "tiny-model", help="write a tiny Qwen3-architecture model (random weights) for trying the lm policy offline",
        description="Write a tiny model in Hugging Face format into DIR, built here in seconds without the hub: "
                    "2 layers, about 140k parameters, random weights, a tokenizer for the press task app's chats "
                    "and a chat template. It is for trying the lm policy (configs/rl/lm_press.toml with "
                    "`synth-tui taskapp --game press --asks A`), not a model to use; a real one is any local "
                    "Hugging Face folder with a chat template (e.g. `hf download Qwen/Qwen3-0.6B --local-dir DIR`). "
                    "Needs pip install 'synth-tui[trainer]'.")
    tiny.add_argument("folder", metavar="DIR", help="a new or empty folder")
    tiny.add_argument("--seed", type=_count(0, 2**32 - 1), default=0, help="the weights' seed (default 0)")


def _labels(text: str) -> tuple[str, ...]:
    """``--asks``: comma-separated buttons of the press task app, each once."""
    labels = tuple(part.strip().upper() for part in text.split(","))
    wrong = [label for label in labels if label not in PRESS_LABELS]
    if wrong or not labels:
        raise argparse.ArgumentTypeError(f"{text[:20]!r} is not a comma-separated list of buttons from "
                                         f"{', '.join(PRESS_LABELS)} (e.g. A or A,C)")
    return tuple(dict.fromkeys(labels))


def _add_jobs_parser(sub: argparse._SubParsersAction) -> None:
    """``synth-tui jobs``: the backend's job list (docs/product.md#jobs-view)."""
    from app.core.api.job_paging import JOB_PAGE_SIZE, MAX_LISTED_JOBS, SORTS

    jobs = sub.add_parser("jobs", help="every job the backend knows (k9s-style): attach, cancel, rerun")
    jobs.add_argument("--backend", metavar="URL", help="backend base URL, http(s)://HOST[:PORT] (/api is appended)")
    jobs.add_argument("--env-file", action="append", default=[], metavar="PATH", help=".env with SYNTH_API_KEY")
    jobs.add_argument("--status", metavar="STATUS", type=_status_word,
                      help="only jobs with this status (e.g. running), as the backend filters them")
    jobs.add_argument("--limit", type=_count(1, 100_000), default=MAX_LISTED_JOBS, metavar="N",
                      help=f"list at most N jobs, newest first (default {MAX_LISTED_JOBS})")
    jobs.add_argument("--page-size", type=_count(1, 500), default=JOB_PAGE_SIZE, metavar="N",
                      help=f"jobs per request to the backend (default {JOB_PAGE_SIZE})")
    jobs.add_argument("--sort", choices=SORTS, default="created", help="the order (default: newest first)")
    jobs.add_argument("--no-tui", action="store_true", help="print the jobs as a table")


def _add_rollouts_parser(sub: argparse._SubParsersAction) -> None:
    """``synth-tui rollouts``: the episodes a backend kept for a job (docs/product.md#rollouts)."""
    rollouts = sub.add_parser("rollouts", help="the rollouts a backend kept for a job, best first; --id one of "
                                               "them turn by turn")
    rollouts.add_argument("job_id")
    rollouts.add_argument("--step", type=_count(0, 2**62), metavar="N", help="only the rollouts of training step N "
                                                                         "(and the eval after it)")
    rollouts.add_argument("--phase", choices=["train", "eval"], help="only training or only eval rollouts")
    rollouts.add_argument("--id", metavar="ROLLOUT_ID", help="print this rollout turn by turn")
    rollouts.add_argument("--json", action="store_true", help="print JSON")
    rollouts.add_argument("--backend", metavar="URL",
                          help="backend base URL, http(s)://HOST[:PORT] (/api is appended)")
    rollouts.add_argument("--env-file", action="append", default=[], metavar="PATH", help=".env with SYNTH_API_KEY")


def _add_serve_parser(sub: argparse._SubParsersAction) -> None:
    """``synth-tui serve``: the app in a browser (docs/browser.md)."""
    serve = sub.add_parser(
        "serve", help="the same app in a browser (textual-serve): prints a URL that carries a token",
        usage="synth-tui serve [--host HOST] [--port PORT] [COMMAND ...]",
        description="Serve the app to a browser: each tab runs its own synth-tui COMMAND (default: the guided "
                    "session; also demo, attach JOB_ID, jobs, history, compare JOB_ID..., with their flags) and "
                    "closing the tab stops it. Only this machine can connect unless --host says otherwise, and "
                    "every request needs the token in the printed URL. docs/browser.md")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default: %(default)s; anything else is reachable beyond this "
                            "machine, unencrypted: a warning is printed)")
    serve.add_argument("--port", type=_count(0, 65535), default=8000,
                       help="port to listen on (default: %(default)s; 0: any free port)")
    serve.add_argument("command_line", nargs=argparse.REMAINDER, metavar="COMMAND",
                       help="what each tab runs, with its flags, after serve's own options")


def _count(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not from {low} to {high:,}")
        return value

    return parse


def _fraction(text: str) -> float:
    """A share of a GPU's memory: above 0, at most 1 (vLLM's gpu_memory_utilization)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{value:g} is not above 0 and at most 1 (a share of the GPU's memory)")
    return value


# A job status as a query value (`jobs --status`): a word, bounded like every flag that goes into
# a URL (a job id: app.core.api.wire.job_id_problem; a rollout id: app.core.runs.rollouts).
MAX_STATUS_CHARS = 64


def _status_word(text: str) -> str:
    """``--status``: 1 to 64 letters, digits, underscores, dots or hyphens (a status such as
    running or succeeded). Named, never echoed whole: a mistaken paste may be long, or a key."""
    if not text:
        raise argparse.ArgumentTypeError("it is empty; a status is a word such as running or succeeded")
    if len(text) > MAX_STATUS_CHARS:
        raise argparse.ArgumentTypeError(f"it is {len(text):,} characters long; a status is at most "
                                         f"{MAX_STATUS_CHARS} (e.g. running or succeeded)")
    for position, char in enumerate(text, start=1):
        if not (char.isascii() and (char.isalnum() or char in "_.-")):
            raise argparse.ArgumentTypeError(f"character {position} is not a letter, digit, _, . or -; a status "
                                             "is a word such as running or succeeded")
    return text


# An unknown command is echoed only when it reads as a word: a mistaken paste may be a key.
MAX_ECHOED_COMMAND_CHARS = 24


def unknown_command(argv: Sequence[str]) -> str | None:
    """The message for a first word that is neither a command nor a flag (``synth-tui
    frobnicate``), or None. Without it the word went to ``train`` as an unexpected argument."""
    if not argv or argv[0].startswith("-") or argv[0] in COMMANDS:
        return None
    word = argv[0]
    shown = (f"'{word}'" if len(word) <= MAX_ECHOED_COMMAND_CHARS and word.isascii()
             and all(char.isalnum() or char in "_.-" for char in word) else f"(a word of {len(word):,} characters)")
    return (f"synth-tui: unknown command {shown}. The commands: {', '.join(COMMANDS)} "
            "(synth-tui --help says what each does).")


def normalise_argv(argv: Sequence[str]) -> list[str]:
    """``synth-tui [flags]`` means ``synth-tui train [flags]``."""
    argv = list(argv)
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        return ["train", *argv]
    return argv
