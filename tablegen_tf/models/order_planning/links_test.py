"""Reading L as field transitions (links.py) on hand-made matrices, against the link layer."""

import collections
import math

import numpy as np
import tensorflow as tf

from tablegen_tf.models.order_planning import links
from tablegen_tf.models.order_planning.layers import LinkAttention

IDS = {"name": 3, "food": 4, "area": 5, "near": 6}  # ids 0-2: <pad> <unk> <none>


def _matrix(entries):
    matrix = np.zeros((7, 7))
    for (source, target), value in entries.items():
        matrix[IDS[source], IDS[target]] = value
    return matrix


# L[from, to]: name -> food -> area -> near, and a large diagonal that must not count
HAND_L = _matrix({("name", "food"): 2.0, ("name", "area"): 1.0, ("name", "near"): -1.0, ("name", "name"): 5.0,
                  ("food", "area"): 1.5, ("food", "name"): 0.5, ("area", "near"): 1.0, ("near", "name"): 0.3})


def test_rows_rank_off_diagonal_entries_against_reference_transitions():
    orders = [["name", "food", "area", "near"]] * 3 + [["name", "area", "food"]] + [["food", "name"]] * 4
    transitions = links.count_transitions(orders)
    assert transitions[("name", "food")] == 3 and transitions[("area", "food")] == 1
    reports = {r.field: r for r in links.row_reports(HAND_L, IDS, transitions)}
    assert set(reports) == {"name", "food", "area"}  # near has no outgoing transition
    name = reports["name"]
    assert [n for n, _ in name.learnt] == ["food", "area", "near"]  # the diagonal 5.0 is left out
    assert name.reference == [("food", 0.75), ("area", 0.25)]
    assert name.argmax_agrees and math.isclose(name.rho, 1.0)
    assert reports["area"].argmax_agrees  # near 3 : food 1
    assert not reports["food"].argmax_agrees  # L says area (1.5), the references name 4 : area 3
    transposed = {r.field: r for r in links.row_reports(HAND_L.T, IDS, transitions)}
    assert transposed["name"].learnt == [("food", 0.5), ("near", 0.3), ("area", 0.0)]  # column name of L
    assert not transposed["area"].argmax_agrees  # L[food, area] 1.5 is the largest into area


def test_greedy_chain_and_mean_positions():
    assert links.greedy_chain(HAND_L, IDS, "name") == ["name", "food", "area", "near"]
    positions = links.mean_relative_positions([["name", "food", "area"], ["food", "name"], ["name"]])
    assert positions == {"name": (0 + 1 + 0) / 3, "food": (0.5 + 0) / 2, "area": 1.0}
    assert math.isclose(links.rank_correlation([1, 2, 2, 3], [10, 20, 20, 30]), 1.0)
    assert math.isnan(links.rank_correlation([1, 1, 1], [1, 2, 3]))


def test_next_field_accuracy_reads_the_link_layer_field_mass():
    """The report's "field with the most link attention" is what eq. 8-9 of LinkAttention give."""
    layer = LinkAttention(7)
    layer.build()
    layer.link.assign(HAND_L.astype(np.float32))
    fields = ["name", "name", "name", "food", "area", "near", "near"]  # a 3-word name, a 2-word near
    field_ids = tf.constant([[IDS[f] for f in fields]])
    mask = tf.ones_like(field_ids, tf.bool)
    tokens = collections.Counter(fields)
    for source in ("name", "food", "area", "near"):
        previous = np.array([[f == source for f in fields]], np.float32)
        alpha = layer(tf.constant(previous / previous.sum()), layer.table_links(field_ids), mask).numpy()[0]
        mass = {f: alpha[[k for k, g in enumerate(fields) if g == f]].sum() for f in tokens if f != source}
        layer_choice = max(mass, key=mass.get)
        for target in mass:
            hit = links.next_field_accuracy(HAND_L, IDS, [tokens], [[source, target]])
            assert hit == (target == layer_choice), (source, target, mass)
    # near -> name: L 0.3 plus three name tokens beat area's one token (L 0)
    assert links.next_field_accuracy(HAND_L, IDS, [tokens], [["near", "name"]]) == 1.0
    assert links.next_field_accuracy(HAND_L, IDS, [tokens], [["near", "name"]], weigh_tokens=False) == 1.0


def test_column_share_separates_a_field_prior_from_an_order():
    prior = _matrix({(a, "near"): 1.0 for a in IDS if a != "near"})  # "always go to near"
    assert math.isclose(links.column_share(prior, IDS), 1.0)
    cycle = _matrix({("name", "food"): 1.0, ("food", "area"): 1.0, ("area", "near"): 1.0, ("near", "name"): 1.0})
    assert links.column_share(cycle, IDS) < 0.1  # every column has one 1 and two 0
    transitions = {("name", "food"): 3, ("food", "area"): 1}
    logp = links.log_next_field_probabilities(transitions, IDS, 7)
    np.testing.assert_allclose(np.exp(logp[IDS["name"], [4, 5, 6]]), [4 / 6, 1 / 6, 1 / 6])
    assert logp[IDS["name"], IDS["name"]] == 0.0


def test_transition_agreement_ignores_a_field_prior():
    cycle = {("name", "food"): 1.0, ("food", "area"): 1.0, ("area", "near"): 1.0, ("near", "name"): 1.0}
    prior = {(a, "near"): 3.0 for a in IDS if a != "near"}
    with_prior = _matrix({k: cycle.get(k, 0.0) + prior.get(k, 0.0) for k in set(cycle) | set(prior)})
    rho, hits = links.transition_agreement(with_prior, _matrix(cycle), IDS)
    assert math.isclose(rho, 1.0) and hits == 4  # the prior alone would say "near" for every row
    rho, hits = links.transition_agreement(_matrix(prior), _matrix(cycle), IDS)
    assert math.isnan(rho) and hits < 4  # a prior has no transition part


def _table(values_by_field):
    fields, values = [], []
    for name, value in values_by_field:
        fields += [name] * len(value.split())
        values += value.split()
    return fields, values


def test_value_mention_order_reads_where_values_are_copied():
    """WikiBio: multi-token values, a name repeated by article_title, a year shared with years."""
    fields, values = _table([("name", "aaron hohlbein"), ("birth_date", "16 august 1985"),
                             ("birth_place", "middleton , wisconsin , united states"), ("years", "2003 -- 1985"),
                             ("position", "defender"), ("clubs", "kansas city wizards"),
                             ("article_title", "aaron hohlbein")])
    text = ("aaron hohlbein -lrb- born 16 august 1985 in middleton , wisconsin -rrb- is an american soccer "
            "defender who played for the kansas city wizards in 2003 .").split()
    order = links.value_mention_order(fields, values, text)
    # article_title ties with name and loses (earlier field); "1985" is birth_date's longer run,
    # not years; "2003" alone places years last; "," "in" "the" place nothing
    assert order == ["name", "birth_date", "birth_place", "position", "clubs", "years"]
    assert links.value_mention_order(fields, values, "Aaron was born in the town , of course .".split()) == ["name"]
    # a function word shared with a value is no mention; the first content word places the field
    fields, values = _table([("name", "the eagle"), ("area", "city centre"), ("near", "the rice boat")])
    assert links.value_mention_order(fields, values, "the rice boat is near the eagle".split()) == ["near", "name"]
    assert links.value_mention_order(fields, values, "it is in the city of the".split()) == ["area"]


def test_top_transitions_are_the_largest_off_diagonal_entries():
    top = links.top_transitions(HAND_L, IDS, 3)
    assert top == [("name", "food", 2.0), ("food", "area", 1.5), ("name", "area", 1.0)]  # not name > name 5.0
    assert len(links.top_transitions(HAND_L, IDS, 100)) == len(IDS) * (len(IDS) - 1)
