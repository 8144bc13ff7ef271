import time

from tablegen_tf.content_plan import content_plan
from tablegen_tf.schema import Record


def player(first, second, group, **stats):
    name = f"{first} {second}"
    records = [
        Record("PLAYER_NAME", first, 1, 2, name, group),
        Record("PLAYER_NAME", second, 2, 1, name, group),
    ]
    records += [Record("FIRST_NAME", first, entity=name, group=group)]
    records += [Record("SECOND_NAME", second, entity=name, group=group)]
    return records + [Record(k, v, entity=name, group=group) for k, v in stats.items()]


def team(city, name, group, **stats):
    records = [
        Record("TEAM-NAME", name, entity=name, group=group),
        Record("TEAM-CITY", city, entity=name, group=group),
    ]
    return records + [Record(f"TEAM-{k}", v, entity=name, group=group) for k, v in stats.items()]


TABLE = (
    player("Al", "Horford", "home", PTS="17", REB="13", AST="4", TEAM_CITY="Atlanta")
    + player("Kyle", "Korver", "home", PTS="8", REB="4", AST="2", TEAM_CITY="Atlanta")
    + player("Kyle", "O'Quinn", "away", PTS="4", REB="17", AST="2", TEAM_CITY="Orlando")
    + team("Atlanta", "Hawks", "home", PTS="95", WINS="46")
    + team("Orlando", "Magic", "away", PTS="88", WINS="19")
)


def plan_of(text):
    return [(TABLE[i].field, TABLE[i].value, TABLE[i].entity) for i in content_plan(TABLE, text.split())]


def test_numbers_follow_the_most_recently_mentioned_entity():
    assert plan_of("Al Horford had 17 points and 13 rebounds") == [
        ("PLAYER_NAME", "Al", "Al Horford"),
        ("PLAYER_NAME", "Horford", "Al Horford"),
        ("PTS", "17", "Al Horford"),
        ("REB", "13", "Al Horford"),
    ]
    # 17 is also O'Quinn's REB: he is the recent entity here
    assert plan_of("O'Quinn grabbed 17 boards")[-1] == ("REB", "17", "Kyle O'Quinn")


def test_ambiguous_first_name_is_narrowed_by_the_surname():
    assert plan_of("Kyle Korver added 8 points") == [
        ("PLAYER_NAME", "Kyle", "Kyle Korver"),
        ("PLAYER_NAME", "Korver", "Kyle Korver"),
        ("PTS", "8", "Kyle Korver"),
    ]


def test_ambiguous_numbers_without_a_recent_entity_are_skipped():
    assert plan_of("It was 4 in the end") == []  # 4: Horford AST, Korver REB, O'Quinn PTS
    # ... but a unique value is aligned
    assert plan_of("It was 95 in the end") == [("TEAM-PTS", "95", "Hawks")]
    # a mention two sentences back is no longer recent
    plan = plan_of("Horford played . Then rain . Then 4 fans left")
    assert plan == [("PLAYER_NAME", "Horford", "Al Horford")]


def test_stat_word_and_number_words():
    # Korver has REB 4 and AST 2; "four rebounds" is REB, "two" without a stat word is not a number
    assert plan_of("Korver had four rebounds in two games")[1:] == [("REB", "4", "Kyle Korver")]


def test_name_tokens_align_only_to_their_entity_and_records_once():
    plan = plan_of("The Atlanta Hawks ( 46 wins ) beat Orlando . Atlanta won 95 - 88")
    assert plan == [
        ("TEAM-CITY", "Atlanta", "Hawks"),
        ("TEAM-NAME", "Hawks", "Hawks"),
        ("TEAM-WINS", "46", "Hawks"),
        ("TEAM-CITY", "Orlando", "Magic"),
        ("TEAM-PTS", "95", "Hawks"),
        ("TEAM-PTS", "88", "Magic"),
    ]  # the second "Atlanta" is not a player's TEAM_CITY record


def test_rotowire_sentences_style_records():
    records = [
        Record("PLAYER_NAME", "Isaiah_Thomas", entity="Isaiah_Thomas"),
        Record("TEAM_NAME", "Boston", entity="Boston"),
        Record("PLAYER-PTS", "27", entity="Isaiah_Thomas"),
        Record("TEAM-PTS", "110", entity="Boston"),
        Record("TEAM-AST", "27", entity="Boston"),
    ]
    tokens = "Isaiah_Thomas led Boston with 27 points".split()
    assert content_plan(records, tokens) == [0, 1, 2]  # "points": PTS beats Boston's AST 27


def test_fast_on_rotowire_sized_input():
    records = []
    for p in range(26):
        records += player(f"First{p}", f"Last{p}", "home", **{f"S{k}": str((p + k) % 30) for k in range(20)})
    tokens = (" ".join(f"First{p % 26} Last{p % 26} scored {p % 30} points ." for p in range(70))).split()
    start = time.perf_counter()
    plan = content_plan(records, tokens)
    assert time.perf_counter() - start < 0.1
    assert len(plan) == len(set(plan)) > 0
