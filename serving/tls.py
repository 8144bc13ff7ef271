"""TLS for the gRPC and REST front ends, configured like TF Serving.

`--ssl-config-file` reads TF Serving's SSLConfig text proto
(tensorflow_serving/config/ssl_config.proto), whose fields hold PEM *contents*:

    server_key: "-----BEGIN PRIVATE KEY-----\\n..."
    server_cert: "-----BEGIN CERTIFICATE-----\\n..."
    custom_ca: "-----BEGIN CERTIFICATE-----\\n..."   # CA that signs client certificates
    client_verify: true                              # require and verify client certificates

`--ssl-cert-file/--ssl-key-file[/--ssl-client-ca-file]` give the same as PEM file
paths (a client CA turns on client verification). Unlike TF Serving, which
secures only gRPC, the REST port gets the same certificate and client check.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from dataclasses import dataclass
from typing import Optional

SSL_CONFIG_FIELDS = ("server_key", "server_cert", "custom_ca", "client_verify")


@dataclass(frozen=True)
class TLSConfig:
    server_key: bytes
    server_cert: bytes
    custom_ca: bytes = b""
    client_verify: bool = False

    def __post_init__(self):
        if not self.server_key or not self.server_cert:
            raise ValueError("TLS needs both a server key and a server certificate")
        if self.client_verify and not self.custom_ca:
            raise ValueError("client_verify needs custom_ca: the CA that signs client certificates")

    @property
    def mode(self) -> str:
        return "mutual" if self.client_verify else "server"


def _ssl_config_class():
    try:  # shipped by some tensorflow-serving-api builds; not by the pip 2.x wheels
        from tensorflow_serving.config import ssl_config_pb2
        return ssl_config_pb2.SSLConfig
    except ImportError:
        pass
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(
        name="tablegen/ssl_config.proto", package="tensorflow.serving", syntax="proto3")
    message = proto.message_type.add(name="SSLConfig")
    for number, name in enumerate(SSL_CONFIG_FIELDS, start=1):
        kind = descriptor_pb2.FieldDescriptorProto.TYPE_BOOL if name == "client_verify" else \
            descriptor_pb2.FieldDescriptorProto.TYPE_STRING
        message.field.add(name=name, number=number, type=kind,
                          label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()  # private: no clash with a real ssl_config_pb2
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.serving.SSLConfig"))


def parse_ssl_config(text: str) -> TLSConfig:
    """TF Serving's SSLConfig text proto -> TLSConfig."""
    from google.protobuf import text_format

    config = _ssl_config_class()()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as error:
        raise ValueError(f"not a valid SSLConfig text proto: {error}") from error
    return TLSConfig(config.server_key.encode(), config.server_cert.encode(),
                     config.custom_ca.encode(), config.client_verify)


def add_tls_arguments(parser) -> None:
    group = parser.add_argument_group("TLS (gRPC and REST)")
    group.add_argument("--ssl-config-file",
                       help="TF Serving SSLConfig text proto (server_key, server_cert, custom_ca, "
                       "client_verify; PEM contents inline)")
    group.add_argument("--ssl-cert-file", help="server certificate chain (PEM file)")
    group.add_argument("--ssl-key-file", help="server private key (PEM file)")
    group.add_argument("--ssl-client-ca-file",
                       help="CA certificate(s) (PEM file) for mutual TLS: clients must present "
                       "a certificate signed by it")


def tls_from_args(args) -> Optional[TLSConfig]:
    files = [getattr(args, name, None) for name in ("ssl_cert_file", "ssl_key_file",
                                                    "ssl_client_ca_file")]
    config_file = getattr(args, "ssl_config_file", None)
    if config_file and any(files):
        raise ValueError("give either --ssl-config-file or --ssl-cert-file/--ssl-key-file, not both")
    if config_file:
        return parse_ssl_config(_read(config_file).decode())
    if not any(files):
        return None
    cert, key, client_ca = files
    if not cert or not key:
        raise ValueError("--ssl-cert-file and --ssl-key-file go together")
    return TLSConfig(_read(key), _read(cert), _read(client_ca) if client_ca else b"",
                     client_verify=bool(client_ca))


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror}") from error


def grpc_credentials(config: TLSConfig):
    import grpc

    return grpc.ssl_server_credentials(
        [(config.server_key, config.server_cert)],
        root_certificates=config.custom_ca or None, require_client_auth=config.client_verify)


def ssl_context(config: TLSConfig) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # load_cert_chain reads files only: stage the PEMs in a private directory.
    with tempfile.TemporaryDirectory(prefix="tablegen-tls-") as directory:
        cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
        for path, data in ((cert, config.server_cert), (key, config.server_key)):
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
                f.write(data)
        try:
            context.load_cert_chain(cert, key)
        except ssl.SSLError as error:
            raise ValueError(f"server certificate/key do not load: {error}") from error
    if config.custom_ca:
        try:
            context.load_verify_locations(cadata=config.custom_ca.decode())
        except (ssl.SSLError, UnicodeDecodeError) as error:
            raise ValueError(f"custom CA certificate(s) do not load: {error}") from error
    if config.client_verify:
        context.verify_mode = ssl.CERT_REQUIRED
    return context
