"""The reference task: a seeded 5x5 gridworld with one wall.

The seed fixes the wall, the start and the goal (the goal is always reachable, at least two
moves away). Actions: up, down, left, right (row 0 is the top). Moving into the wall or the
edge wastes the turn. The episode ends on the goal or after max_turns.

Score (the episode's return, in [0, 1]): 1.0 minus 0.01 per move taken on reaching the goal,
0 otherwise. A uniformly random walker scores about 0.17 with 12 turns; walking straight to
the goal scores about 0.95.

Sized so that the embedded backend's tabular stand-in goes from chance to above 0.8 in a few
hundred episodes, keyed on the observation's compact `state:` line; more walls make pockets
that a memoryless policy cannot always escape.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

SIZE = 5
WALLS = 1
STEP_COST = 0.01
MOVES = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}

Cell = tuple[int, int]


@dataclass(frozen=True)
class Layout:
    seed: int
    walls: frozenset[Cell]
    start: Cell
    goal: Cell
    shortest: int

    def free(self, cell: Cell) -> bool:
        x, y = cell
        return 0 <= x < SIZE and 0 <= y < SIZE and cell not in self.walls

    def blocked(self, cell: Cell) -> list[str]:
        return [d for d, (dx, dy) in MOVES.items() if not self.free((cell[0] + dx, cell[1] + dy))]

    def describe(self) -> dict[str, Any]:
        return {
            "size": SIZE,
            "walls": sorted(list(w) for w in self.walls),
            "start": list(self.start),
            "goal": list(self.goal),
            "shortest_path": self.shortest,
        }


@lru_cache(maxsize=4096)
def layout(seed: int) -> Layout:
    rng = random.Random(seed)
    cells = [(x, y) for x in range(SIZE) for y in range(SIZE)]
    while True:  # rejection sampling; almost every draw is accepted
        walls = frozenset(rng.sample(cells, WALLS))
        start, goal = rng.sample([c for c in cells if c not in walls], 2)
        candidate = Layout(seed, walls, start, goal, 0)
        dist = _distances(candidate, start).get(goal)
        if dist is not None and dist >= 2:
            return Layout(seed, walls, start, goal, dist)


def _distances(lay: Layout, origin: Cell) -> dict[Cell, int]:
    seen = {origin: 0}
    queue = deque([origin])
    while queue:
        cell = queue.popleft()
        for dx, dy in MOVES.values():
            nxt = (cell[0] + dx, cell[1] + dy)
            if lay.free(nxt) and nxt not in seen:
                seen[nxt] = seen[cell] + 1
                queue.append(nxt)
    return seen


class Episode:
    def __init__(self, seed: int, max_turns: int) -> None:
        self.layout = layout(seed)
        self.pos = self.layout.start
        self.max_turns = max_turns
        self.turns = 0
        self.reached = False

    @property
    def done(self) -> bool:
        return self.reached or self.turns >= self.max_turns

    @property
    def score(self) -> float:
        return max(0.0, 1.0 - STEP_COST * self.turns) if self.reached else 0.0

    def step(self, direction: str | None) -> tuple[bool, float]:
        """Apply one move (None = an unusable answer, which wastes the turn).
        Returns (moved, reward of this step)."""
        self.turns += 1
        moved = False
        if direction in MOVES:
            dx, dy = MOVES[direction]
            nxt = (self.pos[0] + dx, self.pos[1] + dy)
            if self.layout.free(nxt):
                self.pos, moved = nxt, True
        self.reached = self.pos == self.layout.goal
        return moved, self.score if self.reached else 0.0

    def _goal_signs(self) -> tuple[int, int]:
        (x, y), (gx, gy) = self.pos, self.layout.goal
        return (gx > x) - (gx < x), (gy > y) - (gy < y)

    def blocked_towards_goal(self) -> list[str]:
        """The blocked moves that lead towards the goal on some axis."""
        sx, sy = self._goal_signs()
        blocked = set(self.layout.blocked(self.pos))
        return [d for d, (dx, dy) in MOVES.items() if ((dx and dx == sx) or (dy and dy == sy)) and d in blocked]

    def compact_state(self) -> str:
        """What a small policy needs, and nothing that ties it to one layout: which way the goal
        is on each axis and which of the moves towards it are blocked, e.g. `goal=+x-y
        blocked_towards_goal=right`. So one small table learns "walk towards the goal, go round
        what is in the way" on every seed, including eval seeds it never trained on. The key
        says "towards goal" because the text beside it also lists the other blocked moves
        (issue 37: `blocked=-` next to "Blocked moves here: up, left." read as a contradiction)."""
        sx, sy = self._goal_signs()
        stuck = ",".join(self.blocked_towards_goal()) or "-"
        return f"goal={_sign(sx)}x{_sign(sy)}y blocked_towards_goal={stuck}"

    def observation(self) -> dict[str, Any]:
        blocked = self.layout.blocked(self.pos)
        x, y = self.pos
        gx, gy = self.layout.goal
        text = (
            f"Turn {self.turns + 1} of {self.max_turns}. You are at column {x}, row {y} of a "
            f"{SIZE}x{SIZE} grid (row 0 is the top). The goal is at column {gx}, row {gy}. "
            f"Blocked moves here: {', '.join(blocked) or 'none'} "
            f"(blocked towards the goal: {', '.join(self.blocked_towards_goal()) or 'none'}).\n"
            "Call move(direction) with direction up, down, left or right.\n"
            # A compact state, which any task app may send (docs/embedded-policy.md): the
            # embedded stand-in keys its table on this line verbatim.
            f"state: {self.compact_state()}"
        )
        return {
            "text": text,
            "position": [x, y],
            "goal": [gx, gy],
            "blocked": blocked,
            "turn": self.turns,
            "reached_goal": self.reached,
        }


def _sign(v: int) -> str:
    return "+" if v > 0 else "-" if v < 0 else "0"
