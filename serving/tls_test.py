"""TLS and mutual TLS on both ports, configured with PEM file flags or TF Serving's
SSLConfig text proto (certificates: a throwaway CA made in tmp_path)."""

import http.client
import json
import ssl

import grpc
import pytest

from serving import client, testing, tls
from serving.testing import MODEL

TABLES = testing.sample_tables(2)
EXPECTED = [testing.expected_text(t, "v1") for t in TABLES]


@pytest.fixture
def certs(tmp_path):
    directory = tmp_path / "certs"
    directory.mkdir()
    return testing.make_certificates(str(directory))


def serve(base_path, *flags):
    from serving import server

    return server.build_server(testing.serve_args(base_path, *flags)).start()


@pytest.fixture
def tls_server(base_path, certs):
    instance = serve(base_path, "--ssl-cert-file", certs["server_cert"],
                     "--ssl-key-file", certs["server_key"])
    yield instance
    instance.stop()


@pytest.fixture
def mtls_server(base_path, certs, tmp_path):
    read = lambda name: open(certs[name]).read()  # noqa: E731
    config = tmp_path / "ssl_config.txt"
    config.write_text(f"server_key: {json.dumps(read('server_key'))}\n"
                      f"server_cert: {json.dumps(read('server_cert'))}\n"
                      f"custom_ca: {json.dumps(read('ca_cert'))}\n"
                      "client_verify: true\n")
    instance = serve(base_path, "--ssl-config-file", str(config))
    yield instance
    instance.stop()


def generate(instance, tls_options=None):
    return client.generate_remote(f"127.0.0.1:{instance.grpc_port}", MODEL, TABLES, timeout=5,
                                  retries=0, tls=tls_options)


def rest_status(instance, context=None):
    connection = (http.client.HTTPSConnection("127.0.0.1", instance.rest_port, timeout=10,
                                              context=context) if context else
                  http.client.HTTPConnection("127.0.0.1", instance.rest_port, timeout=10))
    try:
        connection.request("GET", f"/v1/models/{MODEL}")
        return connection.getresponse().status
    finally:
        connection.close()


def client_context(certs, with_cert=None):
    context = ssl.create_default_context(cafile=certs["ca_cert"])
    if with_cert:
        context.load_cert_chain(certs[f"{with_cert}_cert"], certs[f"{with_cert}_key"])
    return context


def test_tls_client_succeeds_and_plaintext_fails(tls_server, certs):
    trusted = client.ClientTLS(root_ca_file=certs["ca_cert"], server_name="tablegen.test")
    assert generate(tls_server, trusted) == EXPECTED
    with pytest.raises(grpc.RpcError) as plaintext:
        generate(tls_server)
    assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE
    with pytest.raises(grpc.RpcError) as wrong_name:  # the name is checked against the cert
        generate(tls_server, client.ClientTLS(root_ca_file=certs["ca_cert"], server_name="other.test"))
    assert wrong_name.value.code() == grpc.StatusCode.UNAVAILABLE
    assert rest_status(tls_server, client_context(certs)) == 200
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        rest_status(tls_server)


def test_mutual_tls_rejects_clients_without_a_trusted_certificate(mtls_server, certs):
    with_cert = client.ClientTLS(certs["ca_cert"], certs["client_cert"], certs["client_key"],
                                 server_name="tablegen.test")
    assert generate(mtls_server, with_cert) == EXPECTED
    for rejected in (client.ClientTLS(certs["ca_cert"], server_name="tablegen.test"),
                     client.ClientTLS(certs["ca_cert"], certs["stranger_cert"], certs["stranger_key"],
                                      server_name="tablegen.test")):
        with pytest.raises(grpc.RpcError) as caught:
            generate(mtls_server, rejected)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert rest_status(mtls_server, client_context(certs, "client")) == 200
    for context in (client_context(certs), client_context(certs, "stranger")):
        with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
            rest_status(mtls_server, context)
    assert generate(mtls_server, with_cert) == EXPECTED  # still serving


def test_ssl_config_parsing_and_errors(certs, tmp_path):
    config = tls.parse_ssl_config('server_key: "K"\nserver_cert: "C"\n'
                                  'custom_ca: "A" "B"\nclient_verify: true')
    assert config == tls.TLSConfig(b"K", b"C", b"AB", True) and config.mode == "mutual"
    with pytest.raises(ValueError, match="client_verify needs custom_ca"):
        tls.parse_ssl_config('server_key: "K" server_cert: "C" client_verify: true')
    with pytest.raises(ValueError, match="not a valid SSLConfig"):
        tls.parse_ssl_config("server_keys: 1")
    with pytest.raises(ValueError, match="do not load"):
        tls.ssl_context(tls.TLSConfig(b"not a key", b"not a cert"))
    parser = __import__("argparse").ArgumentParser()
    tls.add_tls_arguments(parser)
    with pytest.raises(ValueError, match="go together"):
        tls.tls_from_args(parser.parse_args(["--ssl-cert-file", certs["server_cert"]]))
    with pytest.raises(ValueError, match="cannot read"):
        tls.tls_from_args(parser.parse_args(["--ssl-config-file", str(tmp_path / "missing")]))
    args = parser.parse_args(["--ssl-cert-file", certs["server_cert"], "--ssl-key-file",
                              certs["server_key"], "--ssl-client-ca-file", certs["ca_cert"]])
    assert tls.tls_from_args(args).client_verify
