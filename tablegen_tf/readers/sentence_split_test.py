from tablegen_tf.readers.base import RawItem, RawTable
from tablegen_tf.readers.sentence_split import sentence_tables, sentences


def _table(text, **slots):
    items = [RawItem(field, value) for field, value in slots.items()]
    return RawTable(example_id="t", source="f:1", items=items, texts=[text])


def _slots(table):
    return [(item.field, item.value) for item in table.items]


def test_sentences_end_at_end_marks_on_tokenized_and_raw_text_and_keep_decimals():
    assert sentences("A costs £ 10.50 . It is near B ! Really ? tail") == [
        "A costs £ 10.50 .", "It is near B !", "Really ?", "tail"]
    assert sentences("A costs £10.50. It is near B!  Really?") == ["A costs £10.50.", "It is near B!", "Really?"]


def test_each_sentence_gets_the_slots_it_realises():
    table = _table("The Vaults is a pub near Café Adriatic . It has a 5 star rating and is cheap .",
                   name="The Vaults", eatType="pub", near="Café Adriatic",
                   customerrating="5 out of 5", priceRange="cheap")
    out = sentence_tables(table)
    assert [t.texts for t in out] == [["The Vaults is a pub near Café Adriatic ."],
                                      ["It has a 5 star rating and is cheap ."]]
    assert _slots(out[0]) == [("name", "The Vaults"), ("eatType", "pub"), ("near", "Café Adriatic")]
    assert _slots(out[1]) == [("customerrating", "5 out of 5"), ("priceRange", "cheap")]  # no name: "It"
    assert [t.example_id for t in out] == ["t:s0", "t:s1"]
    assert all(t.rows == 0 for t in out)  # no input row more: the read/written balance holds
    assert out[0].group_key != table.group_key


def test_unfaithful_empty_single_sentence_and_other_tables_add_nothing():
    contradicting = _table("Aromi is a pub . It serves Chinese food .", name="Aromi", eatType="pub", food="Italian")
    assert [t.texts for t in sentence_tables(contradicting)] == [["Aromi is a pub ."]]
    adding = _table("Aromi is a pub . It is family friendly .", name="Aromi", eatType="pub")
    assert [t.texts for t in sentence_tables(adding)] == [["Aromi is a pub ."]]
    empty = _table("Aromi is a pub . Come along !", name="Aromi", eatType="pub")
    assert [t.texts for t in sentence_tables(empty)] == [["Aromi is a pub ."]]
    assert sentence_tables(_table("Aromi is a pub .", name="Aromi", eatType="pub")) == []
    assert sentence_tables(_table("John plays . He won .", born="1970", team="Lakers")) == []
    merged = RawTable(example_id="m", source="f:2", items=[RawItem("name", "Aromi")], texts=["Aromi .", "Aromi . X ."])
    assert sentence_tables(merged) == []
