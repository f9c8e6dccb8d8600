"""What a Ray task receives for an s3:// root carries no credential: each node resolves
its own (environment, profile, instance role) when it unpickles the store."""

from __future__ import annotations

import cloudpickle

from pipeline.artifacts import ArtifactStore
from pipeline.context import TrainingPlacement
from pipeline.object_store import redact

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
