"""Which worker-holding stages may start (pipeline/admission.py)."""

from __future__ import annotations

from pipeline.admission import Admission


def test_stages_are_admitted_while_their_claims_fit_and_again_once_one_ends():
    admission = Admission({"CPU": 2.0, "GPU": 1.0})
    assert admission.admits({"CPU": 1.0})
    admission.hold("train/a", {"CPU": 1.0})
    assert admission.admits({"CPU": 1.0}) and not admission.admits({"CPU": 2.0})
    admission.hold("train/b", {"CPU": 1.0})
    assert not admission.admits({"CPU": 1.0}) and admission.running() == 2
    admission.release("train/a")
    assert admission.admits({"CPU": 1.0})


def test_a_resource_the_cluster_lacks_waits_for_an_empty_cluster_then_starts_alone():
    admission = Admission({"CPU": 2.0})
    admission.hold("train/cpu", {"CPU": 1.0})
    assert not admission.admits({"CPU": 1.0, "GPU": 1.0})
    admission.release("train/cpu")
    assert admission.admits({"CPU": 8.0, "GPU": 1.0})  # too big for the cluster: Ray holds it, as before
