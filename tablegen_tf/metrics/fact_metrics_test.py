import math

import pytest

from tablegen_tf.metrics import fact_scores
from tablegen_tf.metrics.fact_metrics import is_name_field, is_number, stated_facts

# E2E-like table: one record per value token.
E2E_FIELDS = ["name", "name", "eatType", "eatType", "customer_rating", "near", "near", "priceRange"]
E2E_VALUES = ["The", "Eagle", "coffee", "shop", "5", "Burger", "King", "20-25"]


def tokens(text):
    return text.split()


def test_number_and_name_rules():
    for tok in ["7", "3.5", "1,000", ".500", "20-25", "2017"]:
        assert is_number(tok), tok
    for tok in ["three", "3rd", "3:45", "£20", "1,00", "a1", "-"]:
        assert not is_number(tok), tok
    assert is_name_field("name") and is_name_field("TEAM-NAME") and is_name_field("near")
    assert is_name_field("PLAYER_NAME") and not is_name_field("eatType")
    toks = tokens("The Eagle is near Burger King . It is rated 5 by I and Zizzi")
    facts = stated_facts(toks)
    # "The" and "It" are sentence-initial, "I" is the pronoun.
    assert facts == [
        ("eagle", "name"),
        ("burger", "name"),
        ("king", "name"),
        ("5", "number"),
        ("zizzi", "name"),
    ]


def test_copied_facts_are_supported():
    hyp = tokens("The Eagle is a coffee shop near Burger King with a rating of 5 .")
    s = fact_scores([hyp], [E2E_VALUES], [E2E_FIELDS])
    # Stated: Eagle, Burger, King (capitalised), 5 (number) -> all in the table.
    assert s["num_stated_facts"] == 4 and s["num_stated_numbers"] == 1
    assert s["fact_precision"] == 1.0
    assert s["hallucination_rate"] == 0.0
    assert s["hallucinated_numbers_rate"] == 0.0
    # Table facts: eagle, burger, king (name fields, "the" is a function word), 5, 20-25.
    assert s["num_table_facts"] == 5
    assert s["table_coverage"] == pytest.approx(4 / 5)


def test_hallucinated_number_and_name_are_counted():
    hyp = tokens("The Eagle near Burger King costs 30 and has 3 stars , like Zizzi .")
    s = fact_scores([hyp], [E2E_VALUES], [E2E_FIELDS])
    # Stated: Eagle, Burger, King, 30, 3, Zizzi -> 30, 3, Zizzi unsupported.
    assert s["num_stated_facts"] == 6
    assert s["fact_precision"] == pytest.approx(3 / 6)
    assert s["hallucination_rate"] == pytest.approx(3 / 6)
    assert s["hallucinated_numbers_rate"] == pytest.approx(1.0)
    assert s["table_coverage"] == pytest.approx(3 / 5)


def test_case_insensitive_and_lowercased_outputs_use_name_fields():
    hyp = tokens("the eagle is near burger king , rated 5 .")
    with_fields = fact_scores([hyp], [E2E_VALUES], [E2E_FIELDS])
    # Lowercased: names are found through the name fields (eagle, burger, king) -- "the" is not.
    assert with_fields["num_stated_facts"] == 4
    assert with_fields["fact_precision"] == 1.0
    # Without fields only the number is a stated fact.
    no_fields = fact_scores([hyp], [E2E_VALUES])
    assert no_fields["num_stated_facts"] == 1
    assert no_fields["num_table_facts"] == 2  # 5 and 20-25
    upper = fact_scores([tokens("It is near BURGER king")], [E2E_VALUES], [E2E_FIELDS])
    assert upper["fact_precision"] == 1.0


def test_micro_average_over_the_corpus():
    hyps = [
        tokens("The Eagle has 5 stars ."),  # Eagle, 5: both supported
        tokens("Blue Spice costs 40 , 50 or 60 ."),  # Blue, Spice, 40, 50, 60: none supported
    ]
    tables = [E2E_VALUES, ["Blue", "Spice", "20-25"]]
    fields = [E2E_FIELDS, ["name", "name", "priceRange"]]
    s = fact_scores(hyps, tables, fields)
    assert s["num_stated_facts"] == 7
    assert s["fact_precision"] == pytest.approx(4 / 7)  # Blue, Spice are in table 2
    assert s["hallucinated_numbers_rate"] == pytest.approx(3 / 4)
    # Table facts: 5 + 3 = 8; mentioned: eagle, 5 | blue, spice.
    assert s["table_coverage"] == pytest.approx(4 / 8)


def test_nothing_stated_gives_nan_not_a_fake_score():
    s = fact_scores([tokens("it is nice .")], [["foo"]])
    assert s["num_stated_facts"] == 0
    assert math.isnan(s["fact_precision"]) and math.isnan(s["hallucination_rate"])
    assert math.isnan(s["table_coverage"])


def test_input_validation():
    with pytest.raises(ValueError):
        fact_scores([["a"]], [])
    with pytest.raises(ValueError):
        fact_scores([["a"]], [["x", "y"]], [["name"]])
    with pytest.raises(TypeError):
        fact_scores(["a string"], [["x"]])


def test_webnlg_subjects_and_objects_are_the_entities():
    # "Baku Turkish Martyrs' Memorial | location | Azerbaijan ; ... | designer | Hüseyin Bütüner",
    # one record per value token as the WebNLG reader and table featurizer make them.
    fields = ["subject"] * 3 + ["property"] + ["object"] + ["subject"] * 3 + ["property"] + ["object"] * 2
    values = ["Baku", "Martyrs", "Memorial", "location", "Azerbaijan",
              "Baku", "Martyrs", "Memorial", "designer", "Hüseyin", "Bütüner"]
    hyp = tokens("the baku martyrs memorial in Azerbaijan was designed by Huseyin Butuner .")
    s = fact_scores([hyp], [values], [fields])
    # Table entities: baku, martyrs, memorial, azerbaijan, hüseyin, bütüner (not the property words).
    assert s["num_table_facts"] == 6
    assert s["table_coverage"] == pytest.approx(4 / 6)
    # Stated: baku, martyrs, memorial (lower-cased copies of subject words), Azerbaijan, and
    # Huseyin, Butuner, which the table spells with diacritics: 2 hallucinated entity tokens.
    assert s["num_stated_facts"] == 6
    assert s["hallucination_rate"] == pytest.approx(2 / 6)
