"""Jupyter Lab and TensorBoard behind TLS and a password on a host: the local form of ``testing/jupyter``.

``python -m mlrecipe.notebook`` is the step's program (:mod:`mlrecipe.notebook.__main__`): a self-signed
certificate (:mod:`.certs`), Jupyter Lab with TLS and a token, TensorBoard on a private port, and a TLS +
basic-auth proxy in nginx's place (:mod:`.authproxy`, passwords checked against htpasswd hashes by :mod:`.htpasswd`).
"""
