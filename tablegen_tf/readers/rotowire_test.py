import json
import pathlib
import shutil

import pytest

from tablegen_tf.readers.base import InputError, RawItem, RawTable, Rejection
from tablegen_tf.readers.rotowire import PLAYER_KEYS, RotoWireReader, RotoWireSentencesReader

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "rotowire"
SHARED = ROOT.parent / "shared" / "data" / "rotowire"
SENTENCE_FILES = ("x_type", "x_value", "x_associated", "y_aux")


def read_all(reader, path, split="train"):
    return [item for unit in reader.input_units(str(path), split) for item in reader.read(unit, split)]


# --- rotowire (boxscore-data JSON) ---


def test_fixture_games_records():
    first, second = read_all(RotoWireReader(), FIXTURES / "games.json")
    assert first.example_id == "rotowire:train:games:1" and first.source.endswith("games.json:1")
    assert first.with_content_plan and first.rows == 1 and first.group_key is None
    assert first.texts[0].startswith("The Atlanta Hawks ( 46 - 12 ) beat")
    # 6 players x 24 box-score columns, then 2 x 15 line-score keys
    assert len(first.items) == 6 * 24 + 2 * 15
    assert first.items[:3] == [
        RawItem("PLAYER_NAME", "Nikola Vucevic", "Nikola Vucevic", "away"),
        RawItem("FIRST_NAME", "Nikola", "Nikola Vucevic", "away"),
        RawItem("SECOND_NAME", "Vucevic", "Nikola Vucevic", "away"),
    ]
    assert [i.field for i in first.items[:24]] == list(PLAYER_KEYS)
    pts = {i.entity: (i.value, i.group) for i in first.items if i.field == "PTS"}
    assert pts["Ben Gordon"] == ("N/A", "away") and pts["Al Horford"] == ("17", "home")
    teams = [
        (i.field, i.value, i.entity, i.group) for i in first.items if i.field in ("TEAM-NAME", "TEAM-PTS")
    ]
    assert teams == [
        ("TEAM-NAME", "Hawks", "Hawks", "home"),
        ("TEAM-PTS", "95", "Hawks", "home"),
        ("TEAM-NAME", "Magic", "Magic", "away"),
        ("TEAM-PTS", "88", "Magic", "away"),
    ]


def test_same_city_game_splits_at_second_block_of_starters():
    _, la_game = read_all(RotoWireReader(), FIXTURES / "games.json")
    groups = {i.entity: i.group for i in la_game.items if i.field == "PLAYER_NAME"}
    assert groups == {
        "Chris Paul": "away", "Blake Griffin": "away", "Jamal Crawford": "away",
        "Kobe Bryant": "home", "Pau Gasol": "home", "Nick Young": "home",
    }  # fmt: skip


@pytest.mark.skipif(not SHARED.exists(), reason="shared RotoWire data not available")
def test_sample_game_has_every_players_box_score_line():
    path = SHARED / "sample_orig_rotowire.json"
    (table,) = read_all(RotoWireReader(), path)
    game = json.loads(path.read_text())
    box = game["box_score"]
    records = {(i.field, i.entity): i.value for i in table.items}
    for row, name in box["PLAYER_NAME"].items():
        assert records[("PLAYER_NAME", name)] == name
        assert records[("PTS", name)] == box["PTS"][row]
        assert all(records[(key, name)] == box[key][row] for key in box)
    assert table.texts == [" ".join(game["summary"])]
    assert len(table.items) == len(box["PLAYER_NAME"]) * len(box) + 2 * 15


def _games(tmp_path, mutate):
    games = json.loads((FIXTURES / "games.json").read_text())
    mutate(games)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(games))
    return read_all(RotoWireReader(), path)


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda g: g[1].pop("box_score"), "box_score"),
        (lambda g: g[1].pop("summary"), "summary"),
        (lambda g: g[1].update(summary="not a token list"), "summary"),
        (lambda g: g[1]["box_score"]["PTS"].update({"0": [20]}), "PTS[0]"),
        (lambda g: g[1]["box_score"].update(PTS=[1, 2]), "box_score columns"),
        (lambda g: g[1].update(vis_line=None), "vis_line"),
        (lambda g: g.__setitem__(1, "game"), "not an object"),
    ],
)
def test_malformed_game_is_rejected_with_game_number(tmp_path, mutate, reason):
    out = _games(tmp_path, mutate)
    assert isinstance(out[0], RawTable) and isinstance(out[1], Rejection)
    assert out[1].line == 2 and reason in out[1].reason and out[1].file.endswith("bad.json")


def test_single_game_object_and_invalid_json(tmp_path):
    game = json.loads((FIXTURES / "games.json").read_text())[0]
    path = tmp_path / "one.json"
    path.write_text(json.dumps(game))
    (table,) = read_all(RotoWireReader(), path)
    assert table.example_id == "rotowire:train:one:1"
    path.write_text('[{"home_name": "Hawks",\n  "box_score": }]')
    (rejection,) = read_all(RotoWireReader(), path)
    assert isinstance(rejection, Rejection) and rejection.line == 2 and "invalid JSON" in rejection.reason


def test_missing_input(tmp_path):
    with pytest.raises(InputError):
        RotoWireReader().input_units(str(tmp_path / "missing.json"), "train")
    with pytest.raises(InputError):
        RotoWireReader().input_units(str(tmp_path), "train")


# --- rotowire-sentences ---


def test_sentence_units_from_corpus_dir_split_dir_or_file():
    reader = RotoWireSentencesReader()
    expected = [str(FIXTURES / "sentences" / "train" / "x_type.train.txt")]
    assert reader.input_units(str(FIXTURES / "sentences"), "train") == expected
    assert reader.input_units(str(FIXTURES / "sentences" / "train"), "train") == expected
    assert reader.input_units(expected[0], "train") == expected
    with pytest.raises(InputError):
        reader.input_units(str(FIXTURES / "sentences"), "valid")


def test_sentence_records():
    tables = read_all(RotoWireSentencesReader(), FIXTURES / "sentences")
    assert len(tables) == 4 and all(isinstance(t, RawTable) for t in tables)
    second = tables[1]
    assert second.example_id == "rotowire-sentences:train:2"
    assert second.source.endswith("x_type.train.txt:2")
    assert second.with_content_plan and second.group_key is None
    assert second.items[:3] == [
        RawItem("PLAYER_NAME", "Isaiah_Thomas", "Isaiah_Thomas"),
        RawItem("TEAM_NAME", "Boston", "Boston"),
        RawItem("PLAYER-PTS", "27", "Isaiah_Thomas"),
    ]
    assert second.texts[0].startswith("All-Star Isaiah_Thomas once again led Boston with 27 points")


def _sentences_copy(tmp_path, edits):
    """Copies the fixture split; edits = {kind: function(list of lines) -> lines}."""
    folder = tmp_path / "train"
    shutil.copytree(FIXTURES / "sentences" / "train", folder)
    for kind, edit in edits.items():
        path = folder / f"{kind}.train.txt"
        path.write_text("".join(edit(path.read_text().splitlines(keepends=True))))
    return read_all(RotoWireSentencesReader(), folder), str(folder / "x_type.train.txt")


def test_corrupted_sentence_lines_are_rejected(tmp_path):
    def drop_token(lines):
        lines[1] = lines[1].split(" ", 1)[1]
        return lines

    def empty(lines):
        lines[2] = "\n"
        return lines

    out, x_type = _sentences_copy(tmp_path, {"x_value": drop_token, "y_aux": empty})
    assert [type(x) for x in out] == [RawTable, Rejection, Rejection, RawTable]
    assert (out[1].file, out[1].line) == (x_type, 2) and "token counts differ" in out[1].reason
    assert (out[2].file, out[2].line) == (x_type, 3) and "empty text" in out[2].reason


def test_files_of_different_length_reject_the_missing_lines(tmp_path):
    edits = {"y_aux": lambda lines: lines[:2], "x_type": lambda lines: lines + ["PLAYER_NAME\n"]}
    out, x_type = _sentences_copy(tmp_path, edits)
    assert [type(x) for x in out] == [RawTable, RawTable, Rejection, Rejection, Rejection]
    assert [x.line for x in out[2:]] == [3, 4, 5]
    assert "y_aux" in out[2].reason and "x_value" in out[4].reason


@pytest.mark.skipif(not (SHARED / "sentences").exists(), reason="shared RotoWire data not available")
def test_real_sentence_counts():
    train = read_all(RotoWireSentencesReader(), SHARED / "sentences", "train")
    assert len(train) == 31751 and all(isinstance(t, RawTable) for t in train)
    valid = read_all(RotoWireSentencesReader(), SHARED / "sentences" / "valid", "valid")
    assert len(valid) == 6833


# 13a re-splits "(46-12)" as written ("( 46 - 12 )"), not "three-point" ("three - point"):
# only the sentences fixture has such a hyphen, so only there do tokenized references cost BLEU
@pytest.mark.parametrize("reader, path, tokenized_costs_bleu", [
    (RotoWireReader(), FIXTURES / "games.json", False),
    (RotoWireSentencesReader(), FIXTURES / "sentences", True)])
def test_references_are_scored_detokenized_as_generated_text_is(reader, path, tokenized_costs_bleu):
    """Summaries and y_aux are tokenized ("( 46 - 12 )", "three - point"); generated text is
    detokenized, so scored splits store the references detokenized (training keeps the
    corpus's tokens): a perfect output scores 100 BLEU."""
    from tablegen_tf.metrics.text_metrics import bleu_metric
    from tablegen_tf.readers.build import build_examples
    from tablegen_tf.tokenizer import TokenizerConfig, detokenize_batch

    tables = read_all(reader, path)
    assert all(t.pretokenized for t in tables)
    scored = [e for e, _ in build_examples(tables, TokenizerConfig())[0]]
    trained = [e for e, _ in build_examples(tables, TokenizerConfig(), readable_references=False)[0]]
    assert [e.references for e in trained] == [t.texts for t in tables]
    assert all(a.target_tokens == b.target_tokens for a, b in zip(scored, trained))
    generated = detokenize_batch([e.target_tokens for e in scored])
    assert bleu_metric(True).corpus_score(generated, [[e.references[0] for e in scored]]).score == pytest.approx(100.0)
    tokenized_bleu = bleu_metric(True).corpus_score(generated, [[e.references[0] for e in trained]]).score
    assert tokenized_bleu < 99.0 if tokenized_costs_bleu else tokenized_bleu == pytest.approx(100.0)
