"""gpu_spec.ed25519 against RFC 8032's test 1 and a signature made by `cryptography` (fixed key):
both `verify` (cryptography where it imports) and the reference arithmetic it falls back on."""

from __future__ import annotations

import pytest

from gpu_spec.ed25519 import verify, verify_reference

CHECKS = pytest.mark.parametrize("verify", [verify, verify_reference], ids=["verify", "reference"])

RFC_KEY = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
RFC_SIG = bytes.fromhex(
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b"
    "46bd25bf5f0595bbe24655141438e7a100b"
)
# Ed25519PrivateKey.from_private_bytes(bytes(range(32))).sign(MESSAGE), by cryptography 48.
KEY = bytes.fromhex("03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8")
MESSAGE = b"gpu_spec manifest\n"
SIG = bytes.fromhex(
    "d8938a199ef9b878e55c57d8abe16743d2248734334d63d0df5781cc4b2663b44fa229c670d11565dae64536e05eb"
    "ed6251318def8a034f05056891f68f43d08"
)


@CHECKS
def test_good_signatures_verify(verify):
    assert verify(RFC_KEY, RFC_SIG, b"")
    assert verify(KEY, SIG, MESSAGE)


@CHECKS
@pytest.mark.parametrize("i", [0, 5, 31, 32, 40, 63])
def test_any_changed_byte_is_refused(verify, i):
    bad = bytearray(SIG)
    bad[i] ^= 0x01
    assert not verify(KEY, bytes(bad), MESSAGE)
    key = bytearray(KEY)
    key[i % 32] ^= 0x01
    assert not verify(bytes(key), SIG, MESSAGE)


@CHECKS
def test_other_message_wrong_lengths_and_big_s_are_refused(verify):
    assert not verify(KEY, SIG, MESSAGE + b" ")
    assert not verify(RFC_KEY, RFC_SIG, MESSAGE)
    assert not verify(KEY[:31], SIG, MESSAGE)
    assert not verify(KEY, SIG[:63], MESSAGE)
    # S + L: the same signature in a non-canonical spelling (malleability) is refused.
    s = int.from_bytes(SIG[32:], "little") + 2**252 + 27742317777372353535851937790883648493
    assert s < 2**256
    assert not verify(KEY, SIG[:32] + s.to_bytes(32, "little"), MESSAGE)
