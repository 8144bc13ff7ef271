"""Serving: a TF Serving-compatible gRPC/REST model server and its client.

Modules import TensorFlow lazily from the CLI's point of view: import
`serving.server` for `tablegen serve` and `serving.client` for remote generation.
"""
