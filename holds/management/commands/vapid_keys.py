"""New VAPID keys for Web Push, printed as the two settings lines (nothing is stored)."""

from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.core.management.base import BaseCommand
from py_vapid import Vapid, b64urlencode


class Command(BaseCommand):
    help = (
        "Print a new VAPID key pair as RQ_VAPID_PRIVATE_KEY / RQ_VAPID_PUBLIC_KEY lines. Keep the private "
        "key secret; changing it invalidates every browser's push subscription."
    )

    def handle(self, *args, **options):
        vapid = Vapid()
        vapid.generate_keys()
        number = vapid.private_key.private_numbers().private_value
        private = b64urlencode(number.to_bytes(32, "big"))  # the raw 32-byte key pywebpush accepts
        public = b64urlencode(vapid.public_key.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint))
        self.stdout.write(f"RQ_VAPID_PRIVATE_KEY={private}")
        self.stdout.write(f"RQ_VAPID_PUBLIC_KEY={public}")
