"""Blackjack as a multi-step Gymnasium environment: ``hit`` / ``stand`` actions, a seeded deck.

Each step the model hits or stands, as a function call or as plain text. A hand that ends (bust,
or a stand settled against the dealer) is *terminated* with reward +1 / 0 / -1; an action that is
neither hit nor stand costs ``invalid_action_penalty``, and a hand still open after ``max_turns``
steps is *truncated*. The deck is shuffled from the row's ``seed``, so an episode is reproducible.
"""

from __future__ import annotations

import random
import re
from typing import Any

from gymlab import GymnasiumServer, function_call

RANKS = ["A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K"]


def hand_total(hand: list[str]) -> int:
    """Best blackjack total: aces count 11 unless that busts."""
    total = sum(11 if c == "A" else 10 if c in "JQK" else int(c) for c in hand)
    aces = hand.count("A")
    while total > 21 and aces:
        total, aces = total - 10, aces - 1
    return total


def new_deck(seed: Any) -> list[str]:
    deck = RANKS * 4
    random.Random(seed).shuffle(deck)
    return deck


class BlackjackEnv(GymnasiumServer):
    max_turns: int = 8
    invalid_action_penalty: float = 0.1

    async def reset(self, metadata, session_id=None):
        seed = metadata.get("seed")
        if seed is None:
            seed = random.randrange(2**31)
        deck = new_deck(seed)
        state = {
            "deck": deck,
            "player": [deck.pop(), deck.pop()],
            "dealer": [deck.pop(), deck.pop()],
            "turns": 0,
            "max_turns": int(metadata.get("max_turns", self.max_turns)),
        }
        self.session_state[session_id] = state
        return self._status(state), {"seed": seed}

    async def step(self, action, metadata, session_id=None):
        state = self.session_state.get(session_id)
        if state is None:
            return (
                None,
                0.0,
                False,
                True,
                {
                    "mask_sample": True,
                    "failure_kind": "session_lost",
                    "failure_reason": "no hand is held for this session (the server restarted or the episode ended)",
                },
            )
        state["turns"] += 1
        reward, done, outputs, notes = 0.0, False, [], []
        calls = [item for item in action.output if item.type == "function_call"]
        moves = [(c.name, c) for c in calls] or [(_text_move(action.output_text), None)]
        for name, call in moves:
            if done:
                result = {"error": "the hand is over"}
            elif name in ("hit", "stand"):
                result, reward, done = self._hit(state) if name == "hit" else self._stand(state)
                notes.append(result.get("outcome"))
            else:
                reward -= self.invalid_action_penalty
                result = {"error": f"unknown action {name!r}; call hit or stand"}
            if call is not None:
                outputs.append(self.tool_output(call, result))
        info: dict[str, Any] = {"player_total": hand_total(state["player"])}
        if outputs:
            info["tool_outputs"] = outputs
        if done:
            info.update(outcome=next(n for n in notes if n), dealer_total=hand_total(state["dealer"]))
            return self._result(state, info["outcome"]), reward, True, False, info
        truncated = state["turns"] >= state["max_turns"]
        return self._status(state), reward, False, truncated, info

    def _hit(self, state):
        card = state["deck"].pop()
        state["player"].append(card)
        total = hand_total(state["player"])
        if total > 21:
            return {"card": card, "total": total, "outcome": "bust"}, -1.0, True
        return {"card": card, "total": total}, 0.0, False

    def _stand(self, state):
        dealer = state["dealer"]
        while hand_total(dealer) < 17:
            dealer.append(state["deck"].pop())
        mine, theirs = hand_total(state["player"]), hand_total(dealer)
        outcome = "win" if theirs > 21 or mine > theirs else "push" if mine == theirs else "loss"
        reward = {"win": 1.0, "push": 0.0, "loss": -1.0}[outcome]
        return {"dealer_hand": list(dealer), "dealer_total": theirs, "outcome": outcome}, reward, True

    @staticmethod
    def _status(state) -> str:
        hand = " ".join(state["player"])
        return (
            f"Your hand: {hand} (total {hand_total(state['player'])}). "
            f"Dealer shows: {state['dealer'][0]}. Call hit or stand."
        )

    @staticmethod
    def _result(state, outcome: str) -> str:
        return (
            f"Your hand: {' '.join(state['player'])} (total {hand_total(state['player'])}). "
            f"Dealer's hand: {' '.join(state['dealer'])} (total {hand_total(state['dealer'])}). Outcome: {outcome}."
        )


def _text_move(text: str) -> str:
    found = re.search(r"\b(hit|stand)\b", text.lower())
    return found.group(1) if found else (text.strip()[:40] or "<empty>")


def policy(request):
    """Rule-based player: hit below 17, else stand (function calls when the row offers tools)."""
    users = [i.text for i in request.input_items() if i.type == "message" and i.role == "user"]
    totals = re.findall(r"total (\d+)", users[-1]) if users else []
    move = "hit" if totals and int(totals[0]) < 17 else "stand"
    if any(t.name == move for t in request.tools):
        return [function_call(move, {})]
    return move


if __name__ == "__main__":
    BlackjackEnv.run_webserver()
