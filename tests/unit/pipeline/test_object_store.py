"""What a Ray task receives for an s3:// root carries no credential: each node resolves
its own (environment, profile, instance role) when it unpickles the store; and wherever
a root is shown, its credentials are redacted, whatever characters they hold."""

from __future__ import annotations

from urllib.parse import quote

import cloudpickle
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pipeline.core.artifacts import ArtifactStore
from pipeline.core.context import TrainingPlacement
from pipeline.core.object_store import _credentials, redact

ROOT = "s3://nmt-artifacts/shared?endpoint_override=127.0.0.1:9&scheme=http"
KEY_ID, SECRET = "AKIAEXAMPLEKEYID0001", "wJalrXUtnFEMI-example-secret-0001"


def test_the_store_and_the_train_stages_checkpoint_filesystem_pickle_without_the_nodes_keys(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    store = ArtifactStore(ROOT, local_cache=tmp_path / "cache")
    # Every stage task gets the store; a train stage hands Ray Train the checkpoint
    # filesystem, which it pickles to its controller and to every worker.
    placement = TrainingPlacement(store.durable_staging("train/transformer_tiny", "k1"))
    for received in (store, placement, placement.durable_staging[0]):
        pickled = cloudpickle.dumps(received)
        assert SECRET.encode() not in pickled and KEY_ID.encode() not in pickled, type(received).__name__
    unpickled = cloudpickle.loads(cloudpickle.dumps(store))
    assert unpickled.root_uri == ROOT and not unpickled.is_local


def test_keys_written_into_the_uri_are_redacted_wherever_the_root_is_shown():
    uri = f"s3://{KEY_ID}:{SECRET}@nmt-artifacts/run?endpoint_override=h:9&secret_key={SECRET}"
    assert SECRET not in redact(uri) and KEY_ID not in redact(uri)
    assert redact(uri) == "s3://***@nmt-artifacts/run?endpoint_override=h:9&secret_key=***"


# Secrets made of every character a key or secret may hold, "/", "@", ":", "%", "#",
# "&" and "+" among them; no whitespace or quotes (they end a word on a command line).
SECRET_CHARACTERS = st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="'\""),
                            min_size=8, max_size=40)
AROUND = "error: artifact root {} is not reachable (tracked as nmt.command: nmt run c.yaml --artifact-root {})"


@settings(max_examples=300, deadline=None)
@given(key=SECRET_CHARACTERS, secret=SECRET_CHARACTERS)
def test_generated_secrets_are_redacted_in_every_form_a_root_takes(key, secret):
    assume(secret not in AROUND.format("", "") + "s3://nmt-artifacts/run?endpoint_override=h:9&access_key=***")
    assume(key not in AROUND.format("", "") + "s3://nmt-artifacts/run?endpoint_override=h:9&secret_key=***")
    forms = [
        f"s3://{quote(key, safe='')}:{quote(secret, safe='')}@nmt-artifacts/run?endpoint_override=h:9",
        f"s3://nmt-artifacts/run?endpoint_override=h:9&access_key={quote(key, safe='')}"
        f"&secret_key={quote(secret, safe='')}",
        f"s3://{key}:{secret}@nmt-artifacts/run",  # not encoded: refused or read, never shown
    ]
    for uri in forms:
        shown = redact(AROUND.format(uri, uri))
        for value in (secret, quote(secret, safe=""), quote(secret)):
            assert value not in shown, (uri, shown)
    # Percent-encoded credentials read back as they were written.
    assert _credentials(forms[0]) == (key, secret)
    try:
        _credentials(forms[2])
    except ValueError as refused:
        assert secret not in str(refused) and "percent-encode" in str(refused)
