"""What a signing certificate must be, beyond the chain ``model-signing`` checks.

``model-signing`` verifies a certificate-signed bundle's chain at the signing
certificate's own start of validity (a bundle without a transparency-log entry carries no
trusted time of signing, so the certificate's first valid instant stands for it): a leaf
that has since expired still verifies, which lets a model signed last year keep verifying
after its certificate ran out. We keep that rule (the signature is re-verified at every
full hash; refusing expired certificates would hold models down as tampered on a date)
and add two checks the package leaves out:

- a certificate not yet valid is refused: its start of validity, taken as the time of
  signing, lies in the future (more than five minutes, for clock skew), so no signature
  can have been made under it;
- a certificate whose extended key usage lists purposes must list code signing (or any
  purpose): a TLS server certificate (``serverAuth`` only) is for serving a web site, not
  for vouching for a model (RFC 5280, 4.2.1.12). A certificate without the extension is
  taken, as the package takes it, when its key usage allows digital signatures.

A certificate is named by its subject (RFC 4514) or, with an empty subject, by its
subject alternative names (``email:ops@example.org``).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from .._errors import printable

if TYPE_CHECKING:
    from cryptography import x509

CLOCK_SKEW = datetime.timedelta(minutes=5)
"""How far in the future a certificate's start of validity may lie."""


def certificate_name(certificate: x509.Certificate) -> str:
    """The certificate's subject as RFC 4514 text, or ``SAN <names>`` when it has none."""
    from cryptography import x509

    subject = certificate.subject.rfc4514_string()
    if subject:
        return subject
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return "(no subject, no alternative name)"
    shown = [f"{type(n).__name__.removesuffix('Name').lower()}:{n.value}" for n in names.value]
    return "SAN " + ", ".join(str(name) for name in shown[:4])


def signing_certificate_problem(
    leaf_der: bytes, now: datetime.datetime | None = None
) -> str | None:
    """Why a bundle's signing certificate (``leaf_der``, DER X.509) is refused, or None:
    it is not yet valid at ``now`` (default: the current time), or its extended key usage
    leaves out code signing (``its certificate is for serverAuth only (extended key
    usage), not code signing``, ``its certificate is not valid until 2031-01-01 00:00
    UTC (...)``)."""
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    leaf = x509.load_der_x509_certificate(leaf_der)
    moment = now or datetime.datetime.now(datetime.UTC)
    start = leaf.not_valid_before_utc
    if start > moment + CLOCK_SKEW:
        return (
            f"its certificate is not valid until {start:%Y-%m-%d %H:%M} UTC (no signature "
            "can have been made under it yet)"
        )
    try:
        usage = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return None
    allowed = {ExtendedKeyUsageOID.CODE_SIGNING, ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE}
    if not allowed & set(usage):
        purposes = ", ".join(printable(getattr(u, "_name", u.dotted_string)) for u in usage)
        return f"its certificate is for {purposes} only (extended key usage), not code signing"
    return None
