import math

import pytest
import sacrebleu
from nltk.translate.nist_score import corpus_nist

from tablegen_tf.metrics import corpus_scores
from tablegen_tf.metrics import text_metrics
from tablegen_tf.metrics.text_metrics import bleu_metric, nist_mteval, reference_streams, tokenize_13a

HYPS = [
    "The Eagle is a cheap coffee shop near Burger King.",
    "Zizzi is a pub with a 5 out of 5 rating.",
]
REFS3 = [
    [
        "The Eagle is a cheap coffee shop near Burger King.",
        "Near Burger King, The Eagle is a cheap coffee shop.",
        "The Eagle coffee shop is cheap and near Burger King.",
    ],
    [
        "Zizzi is a pub rated 5 out of 5.",
        "The pub Zizzi has a customer rating of 5 out of 5.",
        "Zizzi, a pub, is rated 5 out of 5 by customers.",
    ],
]


def test_identical_hypotheses_score_100():
    refs = [[h] for h in HYPS]
    scores = corpus_scores(HYPS, refs)
    assert scores["bleu"] == pytest.approx(100.0)
    assert scores["rouge4"] == pytest.approx(1.0)
    assert scores["rougeL"] == pytest.approx(1.0)
    assert scores["nist"] > 0


def test_equal_reference_counts_match_sacrebleu_directly():
    # All items have 3 references: no padding, so the result must be plain sacrebleu.
    expected = sacrebleu.corpus_bleu(HYPS, [list(s) for s in zip(*REFS3)], lowercase=True, tokenize="13a")
    assert corpus_scores(HYPS, REFS3)["bleu"] == pytest.approx(expected.score, abs=1e-9)


def test_none_padding_equals_padding_with_the_items_own_reference():
    # Item 1 has 3 references, item 2 only 1. Padding item 2 with copies of its own
    # reference changes neither its clipped n-gram counts nor its closest reference
    # length, so it must give the same BLEU as sacrebleu's None padding.
    refs = [REFS3[0], [REFS3[1][0]]]
    dup_streams = [list(s) for s in zip(REFS3[0], [REFS3[1][0]] * 3)]
    expected = sacrebleu.corpus_bleu(HYPS, dup_streams, lowercase=True, tokenize="13a").score
    assert corpus_scores(HYPS, refs)["bleu"] == pytest.approx(expected, abs=1e-9)


def test_reference_streams_are_transposed_and_none_padded():
    assert reference_streams([["a1", "a2", "a3"], ["b1"], ["c1", "c2"]]) == [
        ["a1", "b1", "c1"],
        ["a2", None, "c2"],
        ["a3", None, None],
    ]


def test_closest_reference_length_by_hand_and_why_not_empty_string_padding():
    hyps = ["the cat sat on the mat", "hello"]  # 6 and 1 tokens
    refs = [["the cat sat on the mat today ok", "a cat sat on a mat"], ["hello world again"]]
    # Item 1: lengths 8 and 6, closest to 6 is 6. Item 2: only ref has 3 tokens.
    stats = bleu_metric(True).corpus_score(hyps, reference_streams(refs))
    assert (stats.sys_len, stats.ref_len) == (7, 9)
    assert stats.bp == pytest.approx(math.exp(1 - 9 / 7))
    # Padding with "" would add a 0-token reference, closest to the 1-token hypothesis.
    bad = bleu_metric(True).corpus_score(hyps, [[r[0] for r in refs], [refs[0][1], ""]])
    assert bad.ref_len == 6
    # Ties go to the shorter reference (mteval-v13a 'closest'): 5 tokens, refs of 4 and 6.
    tie = bleu_metric(True).corpus_score(["a b c d e"], [["a b c d"], ["a b c d e f"]])
    assert tie.ref_len == 4


def test_blank_references_are_missing_references():
    with_blank = corpus_scores(HYPS, [REFS3[0] + ["   "], [REFS3[1][0], ""]])
    without = corpus_scores(HYPS, [REFS3[0], [REFS3[1][0]]])
    assert with_blank == pytest.approx(without)


def test_single_reference_items():
    refs = [[r[1]] for r in REFS3]
    scores = corpus_scores(HYPS, refs)
    expected = sacrebleu.corpus_bleu(HYPS, [[r[0] for r in refs]], lowercase=True, tokenize="13a").score
    assert scores["bleu"] == pytest.approx(expected, abs=1e-9)
    # With one reference per item NLTK's NIST and mteval's agree (on exactly our tokens).
    nist = corpus_nist([[tokenize_13a(r[0])] for r in refs], [tokenize_13a(h) for h in HYPS], n=4)
    assert scores["nist"] == pytest.approx(nist)
    assert 0 < scores["rougeL"] < 1


def test_nist_matches_mteval_by_hand():
    """Doddington's information weights, clipping by the best reference, mteval's penalty."""
    # one item, one reference "a b c", hypothesis "a b a": unigram info log2(3/1) each, "a"
    # clipped to 1; the bigram "a b" carries log2(count(a)/count(a b)) = 0 information.
    assert nist_mteval([["a", "b", "a"]], [[["a", "b", "c"]]], order=2) == pytest.approx(2 * math.log2(3) / 3)
    # two references (lengths 3 and 5, average 4) for "a b": info(a) = info(b) = log2(8/2) = 2,
    # info(a b) = 0, so 2 before the length penalty exp(-beta ln^2(2/4)), beta = ln 2 / ln^2 1.5
    beta = math.log(2) / math.log(1.5) ** 2
    expected = 2 * math.exp(-beta * math.log(0.5) ** 2)
    refs = [[["a", "b", "c"], ["a", "b", "c", "d", "e"]]]
    assert nist_mteval([["a", "b"]], refs, order=5) == pytest.approx(expected)
    # a hypothesis at 2/3 of the reference length loses half its score
    assert nist_mteval([["a", "b"]], [[["a", "b", "c"]]], order=1) == pytest.approx(0.5 * 2 * math.log2(3) / 2)


def test_nist_is_positive_and_higher_for_better_hypotheses():
    good = corpus_scores(HYPS, REFS3)["nist"]
    worse = corpus_scores(
        ["The Eagle is a shop near King.", "Zizzi has a rating."], REFS3
    )["nist"]
    bad = corpus_scores(["Blue Spice serves French food.", "It is in the city centre."], REFS3)["nist"]
    assert good > worse > bad >= 0
    assert worse > 0


def test_rouge_takes_the_best_reference_per_item():
    refs = [
        ["completely unrelated words here", HYPS[0], "Burger King is near"],
        [HYPS[1], "nothing in common at all"],
    ]
    scores = corpus_scores(HYPS, refs)
    assert scores["rouge4"] == pytest.approx(1.0)
    assert scores["rougeL"] == pytest.approx(1.0)
    # Only one reference per item, the unrelated one: far lower.
    worst = corpus_scores(HYPS, [[refs[0][0]], [refs[1][1]]])
    assert worst["rougeL"] < 0.2


def test_empty_hypotheses():
    scores = corpus_scores(["", ""], REFS3)
    assert scores == {"bleu": 0.0, "nist": 0.0, "rouge4": 0.0, "rougeL": 0.0}
    mixed = corpus_scores([HYPS[0], ""], REFS3)
    assert mixed["bleu"] > 0 and mixed["nist"] > 0
    assert mixed["rougeL"] == pytest.approx(0.5)  # 1.0 and 0.0, averaged


def test_short_hypotheses_do_not_break_nist():
    # No hypothesis has a 5-gram (or 4-gram): NLTK alone would divide by zero.
    scores = corpus_scores(["the eagle", "zizzi pub"], REFS3)
    assert scores["nist"] > 0


def test_lowercase_flag():
    hyps, refs = ["The Eagle Is Cheap ."], [["the eagle is cheap ."]]
    assert corpus_scores(hyps, refs)["bleu"] == pytest.approx(100.0)
    assert corpus_scores(hyps, refs, lowercase=False)["bleu"] < 100.0


def test_nist_tokens_are_sacrebleus_tokens():
    metric = bleu_metric(True)
    for text in HYPS + ["Prices: £20-25, 3.5 stars & 1,000 (don't) <skipped> end."]:
        assert tokenize_13a(text) == metric._preprocess_segment(text).split()


def test_input_validation():
    with pytest.raises(ValueError):
        corpus_scores(HYPS, REFS3[:1])
    with pytest.raises(ValueError):
        corpus_scores([], [])
    with pytest.raises(ValueError):
        corpus_scores(HYPS, [REFS3[0], ["", "  "]])
    with pytest.raises(TypeError):
        corpus_scores(HYPS, [REFS3[0], "a single string"])
    with pytest.raises(TypeError):
        corpus_scores([None, "x"], REFS3)


def test_webnlg_challenge_tokens_split_every_non_word_character():
    # The challenge baseline's " ".join(re.split("(\W)", text)), lowercased; \W is Unicode-aware.
    assert text_metrics.webnlg_challenge_tokens("Spain's 1.5 (km) award-winning Hüseyin_B") == [
        "spain", "'", "s", "1", ".", "5", "(", "km", ")", "award", "-", "winning", "hüseyin_b"]


def test_webnlg_challenge_bleu_by_hand(caplog):
    # p1..p4 = 5/6, 4/5, 3/4, 2/3, no brevity penalty: BLEU = (1/3) ** (1/4).
    assert text_metrics.webnlg_challenge_bleu(["A b c d e f"], [["a b c d e g"]]) == pytest.approx(
        100 * (1 / 3) ** 0.25)
    # Lowercased and split the challenge's way, "1.5-km" equals "1 . 5 - KM"; 13a keeps "1.5" whole.
    assert text_metrics.webnlg_challenge_bleu(["it is 1.5-km long"], [["It is 1 . 5 - KM long"]]) == pytest.approx(100.0)
    assert corpus_scores(["it is 1.5-km long"], [["It is 1 . 5 - KM long"]])["bleu"] < 100.0
    # multi-bleu.perl does not smooth: no matching 4-gram gives 0.
    assert text_metrics.webnlg_challenge_bleu(["a b c x e"], [["a b c d e"]]) == 0.0
    # The closest reference length sets the brevity penalty; blank references are missing ones.
    assert text_metrics.webnlg_challenge_bleu(["a b c d"], [["a b c d e f g h", "a b c d", " "]]) == pytest.approx(100.0)
    # Tokenised on purpose: no "forgot to detokenize" warning from sacrebleu on the console
    # (it warns from 100 hypotheses ending in " ." on; every tokenised sentence does).
    text_metrics.webnlg_challenge_bleu(["it is 1.5 km long."] * 100, [["it is 1.5 km long."]] * 100)
    assert not [r for r in caplog.records if "detokenize" in r.getMessage()]
