"""The real path end to end on a tiny trained model: train -> TensorBoard events ->
`tablegen generate` -> export -> reload in a fresh process (tensorflow +
tensorflow_text only) with the same text -> `tablegen serve` -> gRPC and REST
round trips -> malformed requests get INVALID_ARGUMENT and the server keeps serving.
"""

import dataclasses
import glob
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest
import tensorflow as tf

from trainer_test import data_dir, tiny_config  # noqa: F401  (fixture; tests/ is on sys.path)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVSET = os.path.join(ROOT, "tests", "fixtures", "e2e", "devset.csv")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(data_dir, tmp_path_factory):  # noqa: F811
    from tablegen_tf.training.trainer import Trainer

    out = str(tmp_path_factory.mktemp("run") / "e2e")
    config = tiny_config(data_dir, max_steps=8)
    # slot and coverage reranking, the end gate, the pragmatic listener and minimum Bayes
    # risk on: the fresh-process and served texts below must follow them too; its draws in
    # chunks (8 rows: a batch of more than 2 tables draws 2 samples at a time)
    config = config.replace(decode=dataclasses.replace(config.decode, beam_size=4, slot_rerank_weight=5.0,
                                                       coverage_rerank_weight=1.0, slot_end_penalty=2.0,
                                                       pragmatic_alpha=0.5, mbr_weight=2.0, mbr_samples=4,
                                                       mbr_rows=8))
    Trainer(config, out).train(progress=False)
    return out


@pytest.fixture(scope="module")
def tables():
    from tablegen_tf.inference import read_inputs

    raw, _ = read_inputs("e2e", DEVSET, "valid")
    return [table.serving_input() for table in raw]


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    from tablegen_tf.export import export_saved_model

    base = tmp_path_factory.mktemp("serving")
    export_saved_model(trained, str(base / "tablegen" / "1"))
    return str(base)


def test_export_writes_tf_serving_warmup_requests_that_all_run(exported):
    """TF Serving's warm-up file: serving_default on the shortest and longest example
    table, all of them and PARALLEL_MIN_BATCH rows of them (the parallel searches),
    explain and generate once. (That the server replays them is
    serving/model_manager_test.py's; a replay here cost 346 s on the loaded host.)"""
    from serving.model_manager import warmup_file_requests
    from tablegen_tf.constants import EXAMPLES_ASSET
    from tablegen_tf.generation import PARALLEL_MIN_BATCH

    path = os.path.join(exported, "tablegen", "1")
    with open(os.path.join(path, EXAMPLES_ASSET), encoding="utf-8") as handle:
        examples = sorted(handle.read().splitlines(), key=len)
    requests = warmup_file_requests(path)
    assert [name for name, _ in requests] == ["serving_default"] * 4 + ["explain", "generate"]
    tables = [[t.decode() for t in arrays["tables"]] for _, arrays in requests]
    parallel = [examples[i % len(examples)] for i in range(PARALLEL_MIN_BATCH)]
    assert len(examples) > 1 and tables == [examples[:1], examples[-1:], examples, parallel, examples[:1], examples[:1]]


def _local_texts(run_dir, *flags):
    from tablegen_cli.main import main

    output = os.path.join(run_dir, "dev.txt")
    assert main(["generate", "--model", run_dir, "--format", "e2e", "--input", DEVSET, "--output", output,
                 *flags]) == 0
    with open(output, encoding="utf-8") as handle:
        return handle.read().splitlines()


def test_tensorboard_events_hold_scalars_text_and_images(trained):
    tags = set()
    for path in glob.glob(os.path.join(trained, "logs", "*", "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(value.tag for value in event.summary.value)
    assert {"loss", "perplexity", "learning_rate", "bleu", "samples", "copy_attention"} <= tags


def test_generate_writes_one_line_per_mr_without_unk(trained, tables):
    texts = _local_texts(trained)
    assert len(texts) == len(tables)
    assert not any("<unk>" in text for text in texts)


def test_savedmodel_in_a_fresh_process_matches_the_training_decoder(trained, exported, tables):
    code = (
        "import json, sys\n"
        "import tensorflow as tf, tensorflow_text\n"
        "model = tf.saved_model.load(sys.argv[1])\n"
        "out = model.signatures['serving_default'](tables=tf.constant(json.loads(sys.argv[2])))\n"
        "print(json.dumps([t.decode('utf-8') for t in out['text'].numpy()]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, os.path.join(exported, "tablegen", "1"), json.dumps(tables)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == _local_texts(trained)



# TF Serving's loader (C++ SavedModelBundle; saved_model_cli run does the same): the meta
# graph into a session, the saver's restore op, the init op, the warm-up file replayed, then
# Session.run by the SignatureDef's tensor names. No object graph: a variable the functions
# read but the restore op does not write stays uninitialised.
TF1_SESSION_RUN = """
import json, sys
import tensorflow as tf, tensorflow_text
from tensorflow_serving.apis import prediction_log_pb2
tf.compat.v1.disable_eager_execution()
path, tables = sys.argv[1], json.loads(sys.argv[2])
with tf.compat.v1.Session(graph=tf.Graph()) as session:
    meta = tf.compat.v1.saved_model.load(session, ["serve"], path)
    warmups = tf.compat.v1.io.tf_record_iterator(path + "/assets.extra/tf_serving_warmup_requests")
    for record in warmups:
        request = prediction_log_pb2.PredictionLog.FromString(record).predict_log.request
        name = request.model_spec.signature_name or "serving_default"  # TF Serving's default
        signature = meta.signature_def[name]
        session.run({k: v.name for k, v in signature.outputs.items()},
                    {signature.inputs[k].name: tf.make_ndarray(v) for k, v in request.inputs.items()})
        print("warm-up ran:", name)
    signature = meta.signature_def["serving_default"]
    text = session.run(signature.outputs["text"].name, {signature.inputs["tables"].name: tables})
print(json.dumps([t.decode("utf-8") for t in text]))
"""


def test_a_tables_text_does_not_depend_on_its_batch(trained, exported, tables):
    """Minimum Bayes risk draws samples: a table alone gets the text it gets among others."""
    serve = tf.saved_model.load(os.path.join(exported, "tablegen", "1")).signatures["serving_default"]
    together = [t.decode("utf-8") for t in serve(tables=tf.constant(tables))["text"].numpy()]
    for index in (0, len(tables) - 1):
        alone = serve(tables=tf.constant(tables[index:index + 1]))["text"].numpy()[0].decode("utf-8")
        assert alone == together[index]


def test_draws_in_chunks_of_samples_are_the_draws_of_one_batch(trained, tables):
    """decode.mbr_rows bounds the rows that draw at once (memory); the draws must not change."""
    from tablegen_tf.generation import mbr_sampler
    from tablegen_tf.training.trainer import load_trained

    run = load_trained(trained)
    features = run.featurizer.serving_features(tf.constant(tables[:3]))

    def draws(rows):
        config = dataclasses.replace(run.config.decode, mbr_samples=8, mbr_rows=rows)
        return tf.function(mbr_sampler(run.model, run.featurizer, features, config))()

    whole = draws(1024)
    assert whole[0].shape[:2] == (3, 8)
    for rows in (12, 1):  # chunks of 4 samples, then of one
        ids, lengths, scores = draws(rows)
        np.testing.assert_array_equal(ids, whole[0])
        np.testing.assert_array_equal(lengths, whole[1])
        np.testing.assert_allclose(scores, whole[2], rtol=1e-5)  # fewer rows per matmul: the last bits


def test_savedmodel_runs_as_tf_serving_loads_it(trained, exported, tables):
    """Every warm-up request, then serving_default's text as `tablegen generate` writes it.
    Keras 3 variables exported through a tf.Module were saved as copies the signatures
    do not read (keras-team/keras#20095): TF2's loader coped, TF Serving answered
    FAILED_PRECONDITION "Could not find variable" to every request."""
    proc = subprocess.run(
        [sys.executable, "-c", TF1_SESSION_RUN, os.path.join(exported, "tablegen", "1"), json.dumps(tables)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    ran = {line.split(": ")[1] for line in proc.stdout.splitlines() if line.startswith("warm-up ran: ")}
    assert ran == {"serving_default", "explain", "generate"}
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == _local_texts(trained)


def test_session_runtime_serves_a_real_export_pruned_to_serving_default(trained, exported, tables):
    """`tablegen serve --runtime session` before a swap: serving_default alone (pruned
    copy, serving.partial_load) in a TF1 session, with `tablegen generate`'s texts."""
    from serving.model_manager import register_custom_ops
    from serving.partial_load import load_signatures
    from serving.session_runtime import SessionModel

    register_custom_ops()
    alone = load_signatures(os.path.join(exported, "tablegen", "1"), ["serving_default"], SessionModel)
    try:
        assert list(alone.signatures) == ["serving_default"]
        texts = alone.signatures["serving_default"](tables=tf.constant(tables))["text"]
        assert [t.decode("utf-8") for t in texts] == _local_texts(trained)
    finally:
        alone.close()


def test_generate_signature_decodes_two_beam_widths_as_tablegen_generate(trained, exported, tables):
    """`generate` reads its beam width at run time (one search graph): greedy (1) and a
    beam (3, with the run's slot and coverage reranking) give `tablegen generate`'s texts."""
    from serving.model_manager import register_custom_ops
    from tablegen_tf.export import saved_model_config

    register_custom_ops()
    path = os.path.join(exported, "tablegen", "1")
    generate = tf.saved_model.load(path).signatures["generate"]
    max_length = saved_model_config(path).decode.max_length
    for beam in (1, 3):
        out = generate(tables=tf.constant(tables), beam_size=tf.constant(beam), max_length=tf.constant(max_length),
                       must_include=tf.zeros([len(tables), 0], tf.string))
        texts = [text.decode("utf-8") for text in out["text"].numpy()]
        assert texts == _local_texts(trained, "--beam-size", str(beam)), beam


def test_serving_default_loads_alone_from_a_real_export(exported, tables):
    """What the server loads before a swap (serving.partial_load; on failure it would
    silently load the whole SavedModel): serving_default alone, with the same texts."""
    from serving.model_manager import register_custom_ops
    from serving.partial_load import load_signatures

    register_custom_ops()
    path = os.path.join(exported, "tablegen", "1")
    alone = load_signatures(path, ["serving_default"]).signatures
    assert list(alone) == ["serving_default"]
    whole = tf.saved_model.load(path).signatures["serving_default"]
    assert (alone["serving_default"](tables=tf.constant(tables))["text"].numpy().tolist()
            == whole(tables=tf.constant(tables))["text"].numpy().tolist())


def test_served_over_grpc_and_rest(exported, tables, trained):
    import grpc

    from serving import server
    from serving.client import generate_remote
    from serving.testing import serve_args

    instance = server.build_server(serve_args(exported)).start()
    try:
        address = f"127.0.0.1:{instance.grpc_port}"
        texts = generate_remote(address, "tablegen", tables)
        assert texts == _local_texts(trained)
        body = json.dumps({"instances": tables}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{instance.rest_port}/v1/models/tablegen:predict", data=body, method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            predictions = json.loads(response.read())["predictions"]
        assert [p["text"] for p in predictions] == texts
        for bad in ["not json", '{"table": []}', '{"rows": [{"field": "a", "value": "b"}]}']:
            with pytest.raises(grpc.RpcError) as error:
                generate_remote(address, "tablegen", [bad], retries=0)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert generate_remote(address, "tablegen", tables[:1]) == texts[:1]
    finally:
        instance.stop()


def test_explain_says_the_served_text_with_its_copy_sources(exported, tables):
    """`explain` runs serving_default's search (slot reranking on) keeping every beam: the same
    text on every fixture table, and every copied token names a record holding that word."""
    model = tf.saved_model.load(os.path.join(exported, "tablegen", "1"))
    inputs = tf.constant(tables)
    served = model.signatures["serving_default"](tables=inputs)
    explained = {k: v.numpy() for k, v in model.signatures["explain"](tables=inputs).items()}
    assert list(explained["text"]) == list(served["text"].numpy())
    chosen = explained["chosen"]
    rows = range(len(tables))
    assert [explained["candidates"][b, chosen[b]] for b in rows] == list(explained["text"])
    assert [explained["candidate_scores"][b, chosen[b]] for b in rows] == list(explained["score"])
    copied = 0
    for b in rows:
        for t, record in enumerate(explained["copied_from"][b]):
            if record >= 0:
                copied += 1
                assert explained["tokens"][b, t] == explained["source"][b, record]
                assert explained["copy_probability"][b, t] > 0.5
        shown = explained["tokens"][b] != b""
        sums = explained["attention"][b].sum(axis=1)
        assert abs(sums[shown] - 1).max() < 1e-3 and not sums[~shown].any()
    assert copied > 0
    assert set(explained["slot_errors"].reshape(-1)) <= {b"", b"missed", b"wrong", b"added"}


def _browser():
    """Debian's chromium under Selenium (never Selenium Manager's downloads), or a skip."""
    import shutil

    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in requirements.txt")
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (binary and driver):
        pytest.skip("no chromium + chromedriver: apt-get install chromium chromium-driver "
                    "(scripts/setup.sh does as root)")
    return webdriver, binary, driver


def _rest_predict(address, body):
    request = urllib.request.Request(f"http://{address}/v1/models/tablegen:predict",
                                     data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return 200, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_try_it_page_in_chromium(exported, tables, tmp_path):
    """`tablegen serve` + headless Chromium: fill a table, Generate, read the text, hover a
    copied token, see its heat-map column light up; a bad table shows the server's message."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from serving.testing import ServerProcess

    webdriver, binary, driver_path = _browser()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,1100",
                 f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    table = json.loads(tables[0])["table"]
    with ServerProcess(exported, timeout=300, command=("-m", "tablegen_cli.main", "serve")) as server:
        expected = _rest_predict(server.rest_address, {"instances": [json.dumps({"table": table})]})[1]
        browser = webdriver.Chrome(service=webdriver.ChromeService(driver_path), options=options)
        try:
            wait = WebDriverWait(browser, 60)
            browser.get(f"http://{server.rest_address}/")
            wait.until(lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true")
            assert browser.find_elements(By.CSS_SELECTOR, "#examples button.example"), "no corpus examples"
            _fill_table(browser, By, [(item["field"], item["value"]) for item in table])
            browser.find_element(By.ID, "generate").click()
            text = wait.until(lambda b: b.find_element(By.ID, "text").text)
            assert text == expected["predictions"][0]["text"]
            copied = browser.find_elements(By.CSS_SELECTOR, "#tokens .tok.copied")
            assert copied, "no copied token highlighted"
            ActionChains(browser).move_to_element(copied[0]).perform()
            record = copied[0].get_attribute("data-record")
            assert "hot" in browser.find_element(By.CSS_SELECTOR, f'#heatmap th[data-record="{record}"]').get_attribute("class")
            tokens = browser.find_elements(By.CSS_SELECTOR, "#tokens .tok")
            records = browser.find_elements(By.CSS_SELECTOR, "#heatmap thead th[data-record]")
            cells = browser.find_elements(By.CSS_SELECTOR, "#heatmap td.cell")
            assert len(cells) == len(tokens) * len(records) > 0
            assert browser.find_elements(By.CSS_SELECTOR, "#candidates tr.chosen")
            screenshot = str(tmp_path / "try-it.png")
            assert browser.save_screenshot(screenshot)
            if os.environ.get("TABLEGEN_TRY_IT_SCREENSHOT"):  # e.g. a CI artifact
                import shutil

                shutil.copy(screenshot, os.environ["TABLEGEN_TRY_IT_SCREENSHOT"])
            permalink = browser.find_element(By.ID, "permalink").get_attribute("href")
            browser.get("about:blank")
            browser.get(permalink)  # the table is in the fragment: the page regenerates it
            assert wait.until(lambda b: b.find_element(By.ID, "text").text) == text

            bad = [("", "pub")]  # an item without a field: the model's parser refuses it
            status, error = _rest_predict(server.rest_address, {"signature_name": "explain", "inputs": {
                "tables": [json.dumps({"table": [{"field": f, "value": v} for f, v in bad]})]}})
            assert status == 400
            _fill_table(browser, By, bad)
            browser.find_element(By.ID, "generate").click()
            shown = wait.until(lambda b: b.find_element(By.ID, "error").text)
            assert shown == error["error"]
            assert not browser.find_element(By.ID, "output").is_displayed()
        finally:
            browser.quit()


def _fill_table(browser, by, rows):
    for button in browser.find_elements(by.CSS_SELECTOR, "#rows .remove"):
        button.click()
    for field, value in rows:
        browser.find_element(by.ID, "add-row").click()
        row = browser.find_elements(by.CSS_SELECTOR, "#rows tbody tr")[-1]
        row.find_element(by.CSS_SELECTOR, "input.field").send_keys(field)
        row.find_element(by.CSS_SELECTOR, "input.value").send_keys(value)
