"""RotoWire readers: ``rotowire`` (boxscore-data JSON) and ``rotowire-sentences``.

``rotowire``: one RawTable per game with records as in Wiseman et al. (2017):
every box-score column of every player (field = column key, entity = the
player's PLAYER_NAME, group = home/away) followed by the home and visiting
line scores (field = key such as TEAM-PTS, entity = TEAM-NAME).  "N/A" cells
(players who did not play, bench START_POSITION) are kept as Wiseman did, so
every player has the same fields (a cell missing from a column also counts as
"N/A").  Unlike Wiseman's 22 player fields we also
keep PLAYER_NAME and TEAM_CITY: names are copied from PLAYER_NAME tokens and
the content planner uses them as mentions.  Columns and line-score keys are
emitted in a fixed order (JSON key order is arbitrary).  Games are rejected
with line = game index + 1 (1 for a file holding a single game object): JSON
gives no cheap line numbers.

``rotowire-sentences``: the parallel files of Wang et al. (2019); line i of
x_type/x_value/x_associated is one table, line i of y_aux its text.
"""

from __future__ import annotations

import itertools
import json
import os
from typing import Dict, Iterator, List, Optional, Sequence

from tablegen_tf.readers.base import (
    FormatReader,
    InputError,
    Parsed,
    RawItem,
    RawTable,
    Rejection,
    require_exists,
)

PLAYER_KEYS = (
    "PLAYER_NAME", "FIRST_NAME", "SECOND_NAME", "START_POSITION", "MIN", "PTS",
    "FGM", "FGA", "FG_PCT", "FG3M", "FG3A", "FG3_PCT", "FTM", "FTA", "FT_PCT",
    "OREB", "DREB", "REB", "AST", "TO", "STL", "BLK", "PF", "TEAM_CITY",
)  # fmt: skip
LINE_KEYS = (
    "TEAM-NAME", "TEAM-CITY", "TEAM-PTS_QTR1", "TEAM-PTS_QTR2", "TEAM-PTS_QTR3",
    "TEAM-PTS_QTR4", "TEAM-PTS", "TEAM-FG_PCT", "TEAM-FG3_PCT", "TEAM-FT_PCT",
    "TEAM-REB", "TEAM-AST", "TEAM-TOV", "TEAM-WINS", "TEAM-LOSSES",
)  # fmt: skip
MISSING = "N/A"


class GameError(ValueError):
    """A malformed game: becomes a Rejection."""


def _ordered(keys, canonical: Sequence[str]) -> List[str]:
    return [k for k in canonical if k in keys] + sorted(k for k in keys if k not in canonical)


def _cell(value, where: str) -> str:
    if value is None:
        return MISSING
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise GameError(f"{where}: expected a string or number, got {type(value).__name__}")
    return str(value)


def _require(game: dict, key: str, kind: type):
    if not isinstance(game.get(key), kind):
        raise GameError(f"missing or malformed '{key}' (expected {kind.__name__})")
    return game[key]


def _player_rows(box: dict) -> List[str]:
    names = box.get("PLAYER_NAME")
    if not isinstance(names, dict) or not names:
        raise GameError("box_score has no PLAYER_NAME column")
    if not all(isinstance(k, str) and k.isdigit() for k in names):
        raise GameError("box_score rows must be numbered '0'..'N'")
    return sorted(names, key=int)


def _home_rows(game: dict, box: dict, rows: List[str]) -> set:
    """Rows of home players: by TEAM_CITY, or for same-city games (the two LA
    teams) by position, as the box score lists the visitors first; the home
    block starts at the second run of starters (else at half, as Wiseman did)."""
    cities = box.get("TEAM_CITY", {})
    if game["home_city"] != game["vis_city"]:
        return {r for r in rows if cities.get(r) == game["home_city"]}
    starter = [box.get("START_POSITION", {}).get(r, MISSING) not in (MISSING, "", None) for r in rows]
    split = next((i for i in range(1, len(rows)) if starter[i] and not starter[i - 1]), (len(rows) + 1) // 2)
    return set(rows[split:])


def game_items(game) -> List[RawItem]:
    """Records of one game; raises GameError."""
    if not isinstance(game, dict):
        raise GameError(f"game is a {type(game).__name__}, not an object")
    box = _require(game, "box_score", dict)
    for key in ("home_city", "vis_city"):
        _require(game, key, str)
    if not all(isinstance(column, dict) for column in box.values()):
        raise GameError("box_score columns must be objects mapping row -> value")
    rows = _player_rows(box)
    home = _home_rows(game, box, rows)
    keys = _ordered(box, PLAYER_KEYS)
    items = []
    for row in rows:
        entity = _cell(box["PLAYER_NAME"][row], f"PLAYER_NAME[{row}]")
        group = "home" if row in home else "away"
        for key in keys:
            value = _cell(box[key].get(row, MISSING), f"{key}[{row}]")
            items.append(RawItem(key, value, entity, group))
    for line_key, group in (("home_line", "home"), ("vis_line", "away")):
        line = _require(game, line_key, dict)
        entity = line.get("TEAM-NAME")
        if not isinstance(entity, str) or not entity:
            raise GameError(f"{line_key} has no TEAM-NAME")
        for key in _ordered(line, LINE_KEYS):
            items.append(RawItem(key, _cell(line[key], f"{line_key}.{key}"), entity, group))
    return items


def game_text(game: dict) -> str:
    summary = game.get("summary")
    if not isinstance(summary, list) or not all(isinstance(t, str) for t in summary):
        raise GameError("missing or malformed 'summary' (expected a list of tokens)")
    text = " ".join(summary).strip()
    if not text:
        raise GameError("empty summary")
    return text


def _json_units(path: str, suffix: str) -> List[str]:
    require_exists(path)
    if os.path.isfile(path):
        return [path]
    units = sorted(
        os.path.join(root, name)
        for root, _, names in os.walk(path)
        for name in names
        if name.endswith(suffix)
    )
    if not units:
        raise InputError(f"no *{suffix} files under {path}")
    return units


class RotoWireReader(FormatReader):
    name = "rotowire"

    def input_units(self, path: str, split: str) -> List[str]:
        return _json_units(path, ".json")

    def read(self, unit: str, split: str) -> Iterator[Parsed]:
        try:
            with open(unit, encoding="utf-8") as handle:
                data = json.load(handle)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            yield Rejection(unit, getattr(error, "lineno", 1), f"invalid JSON: {error}")
            return
        games = data if isinstance(data, list) else [data]
        stem = os.path.splitext(os.path.basename(unit))[0]
        for number, game in enumerate(games, start=1):
            yield self._table(unit, split, stem, number, game)

    def _table(self, unit: str, split: str, stem: str, number: int, game) -> Parsed:
        try:
            items, text = game_items(game), game_text(game)
        except GameError as error:
            content = json.dumps(game, ensure_ascii=False)[:500]
            return Rejection(unit, number, f"game {number}: {error}", content)
        example_id = f"rotowire:{split}:{stem}:{number}"
        # summaries are token lists ("( 46 - 12 )"): scored detokenized, as generated text is
        return RawTable(example_id, f"{unit}:{number}", items, [text], with_content_plan=True, pretokenized=True)


SENTENCE_FILES = ("x_type", "x_value", "x_associated", "y_aux")


def _sentence_files(x_type_path: str) -> Dict[str, str]:
    folder, name = os.path.split(x_type_path)
    rest = name[len("x_type"):]
    return {kind: os.path.join(folder, kind + rest) for kind in SENTENCE_FILES}


def _find_x_type(path: str, split: str) -> Optional[str]:
    if os.path.isfile(path):
        return path if os.path.basename(path).startswith("x_type.") else None
    for folder in (path, os.path.join(path, split)):
        candidate = os.path.join(folder, f"x_type.{split}.txt")
        if os.path.isfile(candidate):
            return candidate
    return None


class RotoWireSentencesReader(FormatReader):
    """Unit = the x_type.{split}.txt file; its three siblings are found by name."""

    name = "rotowire-sentences"

    def input_units(self, path: str, split: str) -> List[str]:
        require_exists(path)
        x_type = _find_x_type(path, split)
        if x_type is None:
            raise InputError(f"no x_type.{split}.txt in {path} or {os.path.join(path, split)}")
        missing = [p for p in _sentence_files(x_type).values() if not os.path.isfile(p)]
        if missing:
            raise InputError(f"missing parallel file(s): {', '.join(missing)}")
        return [x_type]

    def read(self, unit: str, split: str) -> Iterator[Parsed]:
        paths = _sentence_files(unit)
        handles = [open(paths[kind], "rb") for kind in SENTENCE_FILES]
        try:
            rows = itertools.zip_longest(*handles)
            for number, raw_lines in enumerate(rows, start=1):
                try:  # per line: one bad byte costs one table, not the file
                    lines = [None if raw is None else raw.decode("utf-8") for raw in raw_lines]
                except UnicodeDecodeError as error:
                    content = b" ||| ".join(raw or b"" for raw in raw_lines).decode("utf-8", "replace")
                    yield Rejection(unit, number, f"not UTF-8: {error}", content)
                    continue
                yield self._table(unit, split, number, lines)
        finally:
            for handle in handles:
                handle.close()

    def _table(self, unit: str, split: str, number: int, lines) -> Parsed:
        content = " ||| ".join((line or "").rstrip("\n") for line in lines)
        missing = [kind for kind, line in zip(SENTENCE_FILES, lines) if line is None]
        if missing:
            reason = f"line {number} missing in {', '.join(missing)} (files differ in length)"
            return Rejection(unit, number, reason, content)
        types, values, entities = (line.split() for line in lines[:3])
        text = lines[3].strip()
        if not types or not text:
            return Rejection(unit, number, "empty table" if not types else "empty text (y_aux)", content)
        if not len(types) == len(values) == len(entities):
            counts = f"x_type {len(types)}, x_value {len(values)}, x_associated {len(entities)}"
            return Rejection(unit, number, f"token counts differ: {counts}", content)
        items = [RawItem(t, v, e) for t, v, e in zip(types, values, entities)]
        example_id = f"rotowire-sentences:{split}:{number}"
        # y_aux is tokenized ("122 - 95 ,"): scored detokenized, as generated text is
        return RawTable(example_id, f"{unit}:{number}", items, [text], with_content_plan=True, pretokenized=True)
