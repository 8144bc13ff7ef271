"""The try-it page's side of the REST server: the static files at /, the model list and the
exported examples (the page itself is driven in Chromium by tests/real_model_serving_test.py)."""

import json
import os
import shutil
import urllib.error
import urllib.request

from serving import testing
from tablegen_tf.constants import EXAMPLES_ASSET


def get(running, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{running.rest_port}{path}", timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


def test_the_page_and_its_files_are_served_from_the_package(running):
    status, kind, body = get(running, "/")
    assert (status, kind) == (200, "text/html; charset=utf-8")
    scripts = [line for line in body.decode().splitlines() if "<script" in line or "stylesheet" in line]
    assert scripts and all("/static/" in line and "//" not in line.split("/static/")[0] for line in scripts)
    for name, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
        status, served_kind, body = get(running, f"/static/{name}")
        assert status == 200 and served_kind.startswith(kind)
        with open(os.path.join(os.path.dirname(__file__), "static", name), "rb") as handle:
            assert body == handle.read()


def test_only_the_listed_static_files_are_served(running):
    for path in ("/static/../rest.py", "/static/%2e%2e/rest.py", "/static/missing.js", "/static/",
                 "/static/static/app.js"):
        status, kind, body = get(running, path)
        assert status == 404 and kind == "application/json", path
        assert "no such file" in json.loads(body)["error"]


def test_models_lists_every_served_model_with_its_versions(running):
    status, _, body = get(running, "/v1/models")
    assert status == 200
    models = json.loads(body)["models"]
    assert [m["name"] for m in models] == [testing.MODEL]
    assert [(v["version"], v["state"]) for v in models[0]["model_version_status"]] == [("1", "AVAILABLE")]


def test_examples_come_from_the_exported_asset(tmp_path, exports, running):
    from serving import server

    source = tmp_path / "export"
    shutil.copytree(exports["v1"], source)
    tables = [testing.table_json("name", "Aromi", "area", "riverside"), testing.table_json("name", "Zizzi")]
    os.makedirs(os.path.dirname(source / EXAMPLES_ASSET), exist_ok=True)
    (source / EXAMPLES_ASSET).write_text("".join(t + "\n" for t in tables) + "\n", encoding="utf-8")
    # its own base: `running` polls tmp_path / "models" and would serve version 3 too
    testing.push_version(str(source), str(tmp_path / "other" / testing.MODEL), 3)
    instance = server.build_server(testing.serve_args(str(tmp_path / "other"))).start()
    try:
        for path in ("examples", "versions/3/examples"):
            status, _, body = get(instance, f"/v1/models/{testing.MODEL}/{path}")
            assert status == 200 and json.loads(body) == {"examples": tables}
        status, _, body = get(instance, f"/v1/models/{testing.MODEL}/versions/7/examples")
        assert status == 404 and "version 7" in json.loads(body)["error"]
        status, _, body = get(instance, "/v1/models/nope/examples")
        assert status == 404 and "nope" in json.loads(body)["error"]
    finally:
        instance.stop()
    status, _, body = get(running, f"/v1/models/{testing.MODEL}/examples")  # exported without
    assert status == 200 and json.loads(body) == {"examples": []}
