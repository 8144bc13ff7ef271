from tablegen_tf.readers.base import RawItem, RawTable
from tablegen_tf.readers.clean_slots import clean_table, clean_tables


def _table(text, **slots):
    items = [RawItem(field, value) for field, value in slots.items()]
    return RawTable(example_id="t", source="f:1", items=items, texts=[text])


def _slots(table):
    return [(item.field, item.value) for item in table.items]


def test_missed_and_contradicted_slots_leave_the_table():
    table = _table("The Vaults pub near Café Adriatic has a 5 star rating . Prices start at £ 30 .",
                   name="The Vaults", eatType="pub", priceRange="more than £ 30",
                   customerrating="5 out of 5", food="Italian", near="Café Adriatic")
    cleaned, removed, added = clean_table(table)
    assert (removed, added) == (2, 0)  # the price is not stated as a class, the food not at all
    assert _slots(cleaned) == [("name", "The Vaults"), ("eatType", "pub"), ("customerrating", "5 out of 5"),
                               ("near", "Café Adriatic")]


def test_stated_closed_class_slots_join_in_e2e_order():
    table = _table("For luxurious French food , the Loch Fyne is located by the river .",
                   name="Loch Fyne", food="French", customerrating="high", area="riverside")
    cleaned, removed, added = clean_table(table)
    assert (removed, added) == (1, 1)
    assert _slots(cleaned) == [("name", "Loch Fyne"), ("food", "French"), ("pricerange", "high"),
                               ("area", "riverside")]


def test_faithful_multi_reference_and_non_e2e_tables_are_untouched():
    faithful = _table("Aromi is a pub .", name="Aromi", eatType="pub")
    merged = RawTable(example_id="m", source="f:2", items=faithful.items, texts=["Aromi .", "A pub ."])
    wikibio = _table("John is a player .", born="1970", team="Lakers")
    out, counts = clean_tables([faithful, merged, wikibio])
    assert all(a is b for a, b in zip(out, [faithful, merged, wikibio]))
    assert (counts.tables, counts.changed, counts.removed, counts.added) == (3, 0, 0, 0)


def test_a_text_that_realises_nothing_keeps_its_table():
    table = _table("A nice place .", name="Zizzi", food="Italian")
    assert clean_table(table)[0] is table
