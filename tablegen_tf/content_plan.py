"""Gold content plans: the records a text realises, in order of mention.

Puduppully et al. (2019) train a planner on such sequences, extracted from the
summaries with an information-extraction system.  We use a cheap, rule-based
alignment of target tokens to records instead (pure Python, linear in the
target length times the records sharing a value):

1. Mentions.  A token mentions the entities for which it equals the value of a
   name record (``NAME_FIELDS``: PLAYER_NAME, FIRST_NAME, SECOND_NAME,
   TEAM-NAME, TEAM-CITY, and TEAM_NAME of rotowire-sentences).  A mention of
   several entities ("Kyle" for two Kyles) is narrowed by its neighbour
   tokens' mentions ("Kyle Korver"); only unambiguous mentions count as
   "mentioned" for recency.
2. Alignment.  Walking the target, a token is aligned to at most one unused
   record whose value equals it (number words "zero".."ninety" count as
   digits only before a stat word: "four assists" but not "won three straight").  A name token
   only aligns to records of the entities it mentions.  Among candidates we
   prefer, in order: entities mentioned recently (in this or the previous
   sentence), a field matching the stat word after the token ("17 points" ->
   PTS), the most recently mentioned entity, the earliest record.
3. Ambiguity.  If the candidates belong to several entities and none of them
   was mentioned recently, the token is skipped (mostly numbers: a bare "10"
   matches dozens of records).
Each record is used at most once, so the plan has no repeats.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, List, Optional, Sequence

from tablegen_tf.schema import Record

NAME_FIELDS = frozenset(
    {"PLAYER_NAME", "FIRST_NAME", "SECOND_NAME", "TEAM-NAME", "TEAM-CITY", "TEAM_NAME"}
)
_UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen".split()
_TEENS = "fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
NUMBER_WORDS: Dict[str, str] = {
    **{w: str(i) for i, w in enumerate(_UNITS)},
    **{w: str(i + 14) for i, w in enumerate(_TEENS)},
    **{w: str(20 + 10 * i) for i, w in enumerate(_TENS)},
}
# Stat word after a number -> last part of the record fields it reports.
STAT_CUES: Dict[str, FrozenSet[str]] = {
    "points": frozenset({"PTS"}),
    "rebounds": frozenset({"REB"}),
    "boards": frozenset({"REB"}),
    "assists": frozenset({"AST"}),
    "steals": frozenset({"STL"}),
    "blocks": frozenset({"BLK"}),
    "turnovers": frozenset({"TO", "TOV"}),
    "minutes": frozenset({"MIN"}),
    "fouls": frozenset({"PF"}),
}
SENTENCE_END = frozenset({".", "!", "?"})


def _stat_cue(tokens: Sequence[str], t: int) -> FrozenSet[str]:
    if t + 1 < len(tokens):
        word = tokens[t + 1].lower()
        return STAT_CUES.get(word, STAT_CUES.get(word + "s", frozenset()))
    return frozenset()


def _lookup(token: str, cue: FrozenSet[str]) -> str:
    return NUMBER_WORDS.get(token.lower(), token) if cue else token


def _mentions(records: Sequence[Record], tokens: Sequence[str]) -> List[FrozenSet[str]]:
    names: Dict[str, set] = {}
    for record in records:
        if record.field in NAME_FIELDS and record.entity:
            names.setdefault(record.value, set()).add(record.entity)
    mentions = [frozenset(names.get(token, ())) for token in tokens]
    # Narrow ambiguous mentions by the next, then the previous token's.
    for order in (range(len(tokens) - 2, -1, -1), range(1, len(tokens))):
        for t in order:
            neighbour = mentions[t + 1] if order.step < 0 else mentions[t - 1]
            narrowed = mentions[t] & neighbour
            if len(mentions[t]) > 1 and narrowed:
                mentions[t] = narrowed
    return mentions


def _choose(
    candidates: List[int],
    records: Sequence[Record],
    last_seen: Dict[str, int],
    window_start: int,
    cue: FrozenSet[str],
) -> Optional[int]:
    def key(i: int):
        seen = last_seen.get(records[i].entity, -1)
        return (seen >= window_start, records[i].field.split("-")[-1] in cue, seen, -i)

    entities = {records[i].entity for i in candidates}
    best = max(candidates, key=key)
    if len(entities) > 1 and not key(best)[0]:
        return None  # ambiguous and no candidate entity was mentioned recently
    return best


def content_plan(records: Sequence[Record], target_tokens: Sequence[str]) -> List[int]:
    """Indices of the records realised in `target_tokens`, in order of mention."""
    by_value: Dict[str, List[int]] = {}
    for index, record in enumerate(records):
        by_value.setdefault(record.value, []).append(index)
    mentions = _mentions(records, target_tokens)
    last_seen: Dict[str, int] = {}
    used, plan = set(), []
    sentence_start = window_start = 0  # window = previous + current sentence
    for t, token in enumerate(target_tokens):
        if len(mentions[t]) == 1:
            last_seen[next(iter(mentions[t]))] = t
        cue = _stat_cue(target_tokens, t)
        candidates = [
            i
            for i in by_value.get(_lookup(token, cue), ())
            if i not in used and (not mentions[t] or records[i].entity in mentions[t])
        ]
        choice = _choose(candidates, records, last_seen, window_start, cue) if candidates else None
        if choice is not None:
            used.add(choice)
            plan.append(choice)
        if token in SENTENCE_END:
            window_start, sentence_start = sentence_start, t + 1
    return plan
