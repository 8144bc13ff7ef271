"""Pre-trained word embeddings: PPMI + truncated SVD over unlabelled text, and the
initialiser of a family's word embedding table (``model.pretrained_embeddings``).

Why count-based: the text we have locally is a few million tokens (news headlines, the
WikiBio/RotoWire/E2E/WebNLG texts, training sources); at that size PPMI with context
distribution smoothing + SVD is as good as skip-gram (Levy, Goldberg & Dagan 2015) and
takes seconds with numpy/scipy, deterministically.

File format: word2vec text (a ``count dim`` header line, then ``word v1 .. vdim``), so any
tool can read or write it.
"""

from __future__ import annotations

import collections
import gzip
import os
from typing import Dict, Iterable, Iterator, List, Sequence, Tuple

import numpy as np

CONTEXT_SMOOTHING = 0.75  # context counts ^ 0.75 in PMI (Levy et al. 2015: removes rare-context bias)
TOKENIZE_CHUNK = 4096  # sentences per tokenizer graph call


def read_sentences(paths: Sequence[str], lowercase: bool = False) -> Iterator[List[str]]:
    """Tokens of every non-empty line of ``paths`` (.txt or .gz), with the project tokenizer."""
    from tablegen_tf.tokenizer import TokenizerConfig, tokenize_batch

    config = TokenizerConfig(lowercase=lowercase)
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"embeddings: no such file: {path}")
        opener = gzip.open if path.endswith(".gz") else open
        chunk: List[str] = []
        with opener(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if line:
                    chunk.append(line)
                if len(chunk) >= TOKENIZE_CHUNK:
                    yield from tokenize_batch(chunk, config)
                    chunk = []
        if chunk:
            yield from tokenize_batch(chunk, config)


def build_vocabulary(sentences: Iterable[Sequence[str]], min_count: int, max_words: int) -> List[str]:
    """Words seen at least ``min_count`` times, most frequent first (ties by word), at most ``max_words``."""
    counts = collections.Counter(token for sentence in sentences for token in sentence)
    words = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    return words[:max_words] if max_words else words


def cooccurrence_matrix(sentences: Sequence[Sequence[str]], index: Dict[str, int], window: int):
    """Symmetric word-context counts within ``window`` tokens, weighted 1/distance (as GloVe);
    words outside ``index`` keep their positions but count for nothing."""
    from scipy import sparse

    ids, sentence_of = [], []
    for number, sentence in enumerate(sentences):
        ids.extend(index.get(token, -1) for token in sentence)
        sentence_of.extend([number] * len(sentence))
    ids, sentence_of = np.asarray(ids, np.int64), np.asarray(sentence_of, np.int64)
    rows, cols, weights = [], [], []
    for distance in range(1, window + 1):
        left, right = ids[:-distance], ids[distance:]
        same = (sentence_of[:-distance] == sentence_of[distance:]) & (left >= 0) & (right >= 0)
        rows.append(left[same])
        cols.append(right[same])
        weights.append(np.full(int(same.sum()), 1.0 / distance))
    rows, cols, weights = np.concatenate(rows), np.concatenate(cols), np.concatenate(weights)
    size = len(index)
    counts = sparse.coo_matrix((weights, (rows, cols)), shape=(size, size)).tocsr()
    return counts + counts.T


def ppmi_matrix(counts):
    """Positive PMI of a co-occurrence matrix, contexts smoothed by ``CONTEXT_SMOOTHING``."""
    from scipy import sparse

    counts = sparse.coo_matrix(counts)
    word_totals = np.asarray(counts.sum(1)).ravel()
    context_totals = np.asarray(counts.sum(0)).ravel() ** CONTEXT_SMOOTHING
    total = counts.sum()
    pmi = (np.log(counts.data) + np.log(total) - np.log(word_totals[counts.row])
           - np.log(context_totals[counts.col] / context_totals.sum() * total))
    keep = pmi > 0
    return sparse.csr_matrix((pmi[keep], (counts.row[keep], counts.col[keep])), shape=counts.shape)


def svd_vectors(matrix, dim: int, seed: int = 0) -> np.ndarray:
    """Rows of U sqrt(S) of the rank-``dim`` truncated SVD, each scaled to unit length."""
    from scipy.sparse.linalg import svds

    if dim >= min(matrix.shape):
        raise ValueError(f"embeddings: dim {dim} must be below the vocabulary size {min(matrix.shape)}")
    start = np.random.default_rng(seed).standard_normal(min(matrix.shape))  # ARPACK's start: deterministic
    u, s, _ = svds(matrix.astype(np.float64), k=dim, v0=start)
    order = np.argsort(-s)
    vectors = u[:, order] * np.sqrt(s[order])
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)


def train_embeddings(sentences: Sequence[Sequence[str]], dim: int = 64, window: int = 5, min_count: int = 2,
                     max_words: int = 0, seed: int = 0) -> Tuple[List[str], np.ndarray]:
    """(words, unit vectors [len(words), dim]) by PPMI + SVD of ``sentences``' co-occurrences."""
    sentences = list(sentences)
    words = build_vocabulary(sentences, min_count, max_words)
    if len(words) <= dim:
        raise ValueError(f"embeddings: {len(words)} words of count >= {min_count}; need more than dim={dim}")
    counts = cooccurrence_matrix(sentences, {w: i for i, w in enumerate(words)}, window)
    return words, svd_vectors(ppmi_matrix(counts), dim, seed)


def save_embeddings(path: str, words: Sequence[str], vectors: np.ndarray) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(f"{len(words)} {vectors.shape[1]}\n")
        for word, vector in zip(words, vectors):
            handle.write(word + " " + " ".join(f"{x:.5f}" for x in vector) + "\n")


def load_embeddings(path: str) -> Tuple[List[str], np.ndarray]:
    """(words, vectors) of a word2vec text file; errors name the file and line."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"pretrained embeddings: no such file: {path}")
    words, rows = [], []
    with open(path, encoding="utf-8") as handle:
        header = handle.readline().split()
        if len(header) != 2 or not all(part.isdigit() for part in header):
            raise ValueError(f"{path}:1: expected a 'count dim' header, got {' '.join(header)!r}")
        dim = int(header[1])
        for number, line in enumerate(handle, start=2):
            parts = line.rstrip("\n").split(" ")
            if len(parts) != dim + 1:
                raise ValueError(f"{path}:{number}: expected a word and {dim} numbers, got {len(parts) - 1}")
            words.append(parts[0])
            rows.append(np.asarray(parts[1:], np.float32))
    return words, np.stack(rows) if rows else np.zeros((0, dim), np.float32)


def embedding_matrix(vocab_words: Sequence[str], path: str, dim: int, initial: np.ndarray) -> Tuple[np.ndarray, int]:
    """The embedding table for ``vocab_words`` (row i = word i): pre-trained rows where the file has
    the word, scaled to ``initial``'s mean row norm; ``initial``'s rows elsewhere. -> (table, found)."""
    words, vectors = load_embeddings(path)
    if vectors.shape[1] != dim:
        raise ValueError(f"pretrained embeddings: {path} has dim {vectors.shape[1]}, the model's word_dim is {dim}")
    row_of = {word: i for i, word in enumerate(words)}
    table = np.array(initial, np.float32, copy=True)
    scale = float(np.mean(np.linalg.norm(table, axis=1))) or 1.0
    found = 0
    for i, word in enumerate(vocab_words):
        row = row_of.get(word)
        if row is not None:
            norm = max(float(np.linalg.norm(vectors[row])), 1e-12)
            table[i] = vectors[row] / norm * scale
            found += 1
    return table, found


def initialise_word_embeddings(model, vocab_words: Sequence[str], path: str, freeze: bool = False) -> str:
    """Sets the family's word embedding table (``model.word_embedding_layer()``) from ``path``
    (rows in the vocabulary's order) -> a one-line summary."""
    layer = model.word_embedding_layer()
    if layer is None:
        raise ValueError(f"model.pretrained_embeddings: the {type(model).__name__} family has no word embedding table")
    table = layer.embeddings
    matrix, found = embedding_matrix(vocab_words, path, int(table.shape[1]), table.numpy())
    table.assign(matrix)
    if freeze:
        layer.trainable = False
    return (f"word embeddings: {found:,} of {len(vocab_words):,} vocabulary words from {path}"
            f"{' (frozen)' if freeze else ''}")
