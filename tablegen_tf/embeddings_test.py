"""PPMI + SVD word embeddings and the word-table initialiser."""

import numpy as np
import pytest

from tablegen_tf import embeddings


def clustered_corpus():
    """Animals share the contexts 'the X sat on the mat', markets 'X fell sharply today':
    each word's nearest neighbour is the other word of its group."""
    rng = np.random.default_rng(0)
    groups = {"animal": ["cat", "dog", "horse"], "market": ["stocks", "shares", "bonds"]}
    frames = {"animal": [["the", "{}", "sat", "on", "the", "mat"], ["a", "{}", "ran", "home"]],
              "market": [["{}", "fell", "sharply", "today"], ["investors", "sold", "{}", "quickly"]]}
    sentences = []
    for _ in range(60):
        for group, words in groups.items():
            frame = frames[group][rng.integers(2)]
            sentences.append([words[rng.integers(3)] if token == "{}" else token for token in frame])
    return sentences


def nearest(words, vectors, query):
    index = words.index(query)
    similarity = vectors @ vectors[index]
    similarity[index] = -np.inf
    return words[int(np.argmax(similarity))]


def test_ppmi_svd_puts_words_of_shared_contexts_together():
    words, vectors = embeddings.train_embeddings(clustered_corpus(), dim=4, window=3, min_count=1)
    assert vectors.shape == (len(words), 4)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    for query, group in [("cat", {"dog", "horse"}), ("dog", {"cat", "horse"}),
                         ("stocks", {"shares", "bonds"}), ("bonds", {"stocks", "shares"})]:
        assert nearest(words, vectors, query) in group
    # an animal is far from a market word
    index = {w: i for i, w in enumerate(words)}
    assert vectors[index["cat"]] @ vectors[index["dog"]] > vectors[index["cat"]] @ vectors[index["stocks"]] + 0.5


def test_cooccurrences_stay_within_a_sentence_and_weigh_by_distance():
    index = {"a": 0, "b": 1, "c": 2}
    counts = embeddings.cooccurrence_matrix([["a", "b", "x", "c"], ["c", "a"]], index, window=2).toarray()
    # a-b at distance 1, b-c at 2 (x keeps its position), a-c at distance 1 in the second sentence only
    np.testing.assert_allclose(counts, [[0, 1, 1], [1, 0, 0.5], [1, 0.5, 0]])


def test_file_round_trip_and_errors_name_the_line(tmp_path):
    words, vectors = ["x", "y"], np.array([[0.5, -1.0], [0.25, 2.0]], np.float32)
    path = str(tmp_path / "emb.txt")
    embeddings.save_embeddings(path, words, vectors)
    loaded_words, loaded = embeddings.load_embeddings(path)
    assert loaded_words == words
    np.testing.assert_allclose(loaded, vectors)
    with open(path, "a") as handle:
        handle.write("z 1.0\n")
    with pytest.raises(ValueError, match=r"emb.txt:4: expected a word and 2 numbers, got 1"):
        embeddings.load_embeddings(path)


def test_matrix_rows_follow_the_vocabulary_order(tmp_path):
    path = str(tmp_path / "emb.txt")
    embeddings.save_embeddings(path, ["dog", "cat"], np.array([[0.0, 3.0], [4.0, 0.0]], np.float32))
    initial = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [1.0, 0.0]], np.float32)  # row norms 1
    table, found = embeddings.embedding_matrix(["<pad>", "cat", "bird", "dog"], path, 2, initial)
    assert found == 2
    np.testing.assert_allclose(table, [[1, 0], [1, 0], [0.6, 0.8], [0, 1]], atol=1e-6)  # unit: initial's norm
    with pytest.raises(ValueError, match="has dim 2, the model's word_dim is 3"):
        embeddings.embedding_matrix(["cat"], path, 3, np.zeros((1, 3), np.float32))
