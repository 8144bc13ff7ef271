import math

import pytest

from tablegen_tf.metrics import slot_metrics as sm

TABLE = {"name": "The Eagle", "eattype": "coffee shop", "food": "Italian", "pricerange": "£20-25",
         "familyfriendly": "yes", "near": "Burger King"}


def _records(slots):
    fields = [f for f, v in slots.items() for _ in v.split()]
    return fields, [t for v in slots.values() for t in v.split()]


def test_every_slot_realised_by_paraphrases():
    text = "The Eagle is a moderately priced, family-friendly Italian coffee shop near Burger King."
    alignment = sm.align(TABLE, text)
    assert alignment.errors == 0 and alignment.slots == 6


@pytest.mark.parametrize("text, missed, wrong, added", [
    # familyFriendly and food left out
    ("The Eagle is a coffee shop near Burger King with prices of £20-25.", ["food", "familyfriendly"], [], []),
    # contradictions: another food, the negated family phrase, a different price class
    ("The Eagle is an expensive Chinese coffee shop near Burger King; it is not family-friendly.", [],
     [("food", "chinese"), ("pricerange", "high"), ("familyfriendly", "no")], []),
    # an area and a rating that the table does not hold
    ("The Eagle, a 5 star family friendly Italian coffee shop in the city centre near Burger King, costs £20-25.",
     [], [], [("customerrating", "high"), ("area", "city centre")]),
])
def test_missed_wrong_and_added_slots(text, missed, wrong, added):
    alignment = sm.align(TABLE, text)
    assert sorted(alignment.missed) == sorted(missed)
    assert sorted(alignment.wrong) == sorted(wrong)
    assert sorted(alignment.added) == sorted(added)


def test_names_are_blanked_before_the_closed_classes():
    """"Raja Indian Cuisine" names a place: it is not Indian food, "Café Sicilia" no café."""
    table = {"name": "Cotto", "food": "English", "near": "Raja Indian Cuisine"}
    assert sm.align(table, "Cotto serves English food near Raja Indian Cuisine.").errors == 0
    table = {"name": "Cotto", "eattype": "pub", "near": "Café Sicilia"}
    assert sm.align(table, "Cotto is a pub near Café Sicilia.").errors == 0


@pytest.mark.parametrize("value, text", [
    ("less than £20", "It is cheap."), ("cheap", "Prices are less than £20."), ("high", "It is pricey."),
    ("more than £30", "Expect to pay over £30."), ("moderate", "Its prices are average."),
])
def test_price_classes_accept_their_paraphrases(value, text):
    assert sm.align({"pricerange": value}, text).errors == 0


@pytest.mark.parametrize("value, text", [
    ("1 out of 5", "It has a low customer rating."), ("average", "It is rated 3 out of 5."),
    ("5 out of 5", "A highly rated place."), ("low", "customers rate it 1 out of 5"),
])
def test_rating_classes_accept_their_paraphrases(value, text):
    assert sm.align({"customerrating": value}, text).errors == 0


def test_corpus_rates_from_record_tokens():
    fields, values = _records({"name": "The Eagle", "area": "city centre", "customer rating": "high"})
    assert sm.table_slots(fields, values) == {"name": "The Eagle", "area": "city centre", "customerrating": "high"}
    scores = sm.slot_scores(["The Eagle is in the city centre.", "The Eagle is highly rated by the river."],
                            [(fields, values), (fields, values)])
    # second text: rating realised, area wrong (riverside); first: rating missed
    assert scores["num_slots"] == 6 and math.isclose(scores["slot_error_rate"], 2 / 6)
    assert math.isclose(scores["slot_missed_rate"], 1 / 6) and math.isclose(scores["slot_wrong_rate"], 1 / 6)


def test_non_e2e_tables_give_no_slot_scores():
    assert sm.slot_scores(["Ann was born in 1901."], [(["birth_date", "name"], ["1901", "Ann"])]) == {}


@pytest.mark.parametrize("tokens, text", [
    (["£", "20", "-", "25"], "It is moderately priced."),
    (["less", "than", "£", "20"], "It is cheap."),
    (["more", "than", "£", "30"], "Prices are more than £30."),
])
def test_tokenized_record_values_find_their_class(tokens, text):
    """evaluate and the SavedModel see record tokens, not the raw MR value."""
    slots = sm.table_slots(["priceRange"] * len(tokens), tokens)
    assert sm.align(slots, text).errors == 0


def test_realised_positions_give_the_order_of_mention():
    text = "Near Burger King, the family-friendly The Eagle serves Italian food; not cheap: £20-25."
    positions = sm.realised_positions(TABLE, text)
    assert sorted(positions, key=positions.get) == ["near", "familyfriendly", "name", "food", "pricerange"]
    assert "eattype" not in positions  # not said
    assert sm.realised_positions({"name": "Cotto", "familyfriendly": "yes"}, "Cotto is not kid friendly.") == {
        "name": 0}  # "no" said: familyFriendly yes is not realised
