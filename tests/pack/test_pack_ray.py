"""`--engine ray`: windows as Ray tasks on a local Ray with 2 CPUs give the bytes of `--engine local`."""

from __future__ import annotations

import pytest

from cpplan.pack import pack, read_manifest
from tests.support import pack_data as tp

pytestmark = pytest.mark.slow  # starts a local Ray

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray with 2 CPUs for this module."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def test_ray_engine_output_is_byte_identical_to_local(tmp_path, local_ray):
    """Same dataset, profile and window: the Ray run's shards, rejects, window log and manifest equal
    the local run's byte for byte (ShareGPT input, tokenized inside the Ray tasks, and JSONL input)."""
    profile = tp.profile_path(tmp_path)
    data, _ = tp.write_dataset(tmp_path)
    for source, extra in ((data, {}), (tp.SHAREGPT, {"tokenizer": "bytes"})):
        local, remote = tmp_path / f"local-{source.name}", tmp_path / f"ray-{source.name}"
        pack(source, output=local, solver=profile, window=4, **extra, **tp.SETTINGS)
        pack(source, output=remote, solver=profile, window=4, engine="ray", workers=2, **extra, **tp.SETTINGS)
        assert read_manifest(remote)["windows"] >= 2
        assert tp.folder_bytes(local) == tp.folder_bytes(remote)
    assert local_ray.is_initialized()
