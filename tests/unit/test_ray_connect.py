"""The Ray executor's faults before any work: Ray missing, a cluster that is not there, an
address Ray cannot use. Each is one line from `kvwb run` within seconds, and nothing is written."""

import socket
import sys
from types import SimpleNamespace

import pytest

from test_cli import run_cli, tree
from workbench.errors import WorkbenchError
from workbench.experiments.ray_sweep import connect


def kvwb_run_ray(tmp_path, *options) -> list[str]:
    return ["run", "--executor", "ray", *options, "--n", "1", "--out", tmp_path / "r"]


def assert_one_line_and_nothing_written(code, capsys, tmp_path, before, message):
    out, err = capsys.readouterr()
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert message in err, err
    assert out == ""
    assert tree(tmp_path) == before, "something was written"


def test_without_ray_kvwb_run_names_the_extra_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    before = tree(tmp_path)
    code = run_cli(kvwb_run_ray(tmp_path))
    assert_one_line_and_nothing_written(code, capsys, tmp_path, before, "pip install 'kv-repair-workbench[ray]'")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("address, message", [
    ("127.0.0.1:1", "cannot reach the Ray cluster at 127.0.0.1:1"),
    ("ray://127.0.0.1:1", "cannot reach the Ray cluster at ray://127.0.0.1:1"),
    ("no-port-here", "is not HOST:PORT, ray://HOST:PORT or auto"),
])
def test_an_address_with_no_cluster_behind_it_fails_in_seconds(address, message, tmp_path, monkeypatch, capsys):
    # Ray alone retries an unreachable address for minutes; the probe answers at once.
    ray = pytest.importorskip("ray", reason="the [ray] extra is not installed (make test installs it)")
    assert not ray.is_initialized()
    monkeypatch.setattr("workbench.models._load_folder", lambda *a, **k: pytest.fail("the model was loaded"))
    before = tree(tmp_path)
    code = run_cli(kvwb_run_ray(tmp_path, "--address", address))
    assert_one_line_and_nothing_written(code, capsys, tmp_path, before, message)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("address, message", [
    ("127.0.0.1:1", "cannot reach the Ray cluster"),
    ("[::1]:1", "cannot reach the Ray cluster"),  # IPv6 in brackets: probed, not refused as malformed
    ("ray://127.0.0.1:1", "cannot reach the Ray cluster"),
    ("host:70000", "is not HOST:PORT"),
    ("host:", "is not HOST:PORT"),
])
def test_the_probe_answers_before_ray_is_asked(address, message):
    # needs no Ray: a fake whose init must not be reached
    never = SimpleNamespace(init=lambda **kwargs: pytest.fail("ray.init was called"))
    with pytest.raises(WorkbenchError, match=message):
        connect(never, address)


def test_a_reachable_address_that_ray_refuses_is_one_line_with_the_hint():
    # A port that accepts connections passes the probe; Ray's own refusal (here the one it gives
    # for ray:// without the client extra) becomes one WorkbenchError naming the extra.
    def refuse(**kwargs):
        raise ValueError("Ray Client requires pip package `ray[client]`. If you installed the minimal Ray "
                         "installation,\nplease reinstall by calling `pip install ray[client]`")

    with socket.create_server(("127.0.0.1", 0)) as listening:
        port = listening.getsockname()[1]
        with pytest.raises(WorkbenchError) as raised:
            connect(SimpleNamespace(init=refuse), f"ray://127.0.0.1:{port}")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"could not connect to Ray at ray://127.0.0.1:{port}: Ray Client requires")
    assert "pip install 'ray[client]'" in message


class FakeRay:
    """Ray as far as `run_sweep_ray` goes before its first example: a cluster holding `resources`,
    whose actors never start (a `ray.get` of them times out)."""

    def __init__(self, resources: dict):
        self.resources, self.started, self.stopped, self.submitted, self.timeout = resources, False, False, 0, None
        self.exceptions = SimpleNamespace(GetTimeoutError=TimeoutError, RayActorError=RuntimeError)

    def is_initialized(self):
        return self.started

    def init(self, **kwargs):
        self.started = True

    def cluster_resources(self):
        return dict(self.resources)

    def remote(self, **resources):
        def actor_class(cls):
            def start(*args):
                self.submitted += 1
                return SimpleNamespace(identity=SimpleNamespace(remote=lambda: "a future"))
            return SimpleNamespace(remote=start)
        return actor_class

    def get(self, futures, timeout=None):
        self.timeout = timeout
        raise TimeoutError

    def kill(self, actor):
        pass

    def shutdown(self):
        self.stopped = True


@pytest.mark.parametrize("options, asked", [
    (["--workers", "50"], "50 workers x 1 CPUs and 0 GPUs each ask Ray for 50 CPUs and 0 GPUs, but the cluster has "
                          "2 CPUs and 0 GPUs"),
    (["--cpus-per-worker", "100"], "ask Ray for 200 CPUs and 0 GPUs, but the cluster has 2 CPUs"),
    (["--gpus-per-worker", "0.5"], "ask Ray for 2 CPUs and 1 GPUs, but the cluster has 2 CPUs and 0 GPUs"),
])
def test_a_request_the_machine_cannot_hold_is_refused_before_any_actor(options, asked, tmp_path, monkeypatch,
                                                                       capsys):
    # Ray queued the actors and waited forever, printing nothing (issue 29.8).
    fake = FakeRay({"CPU": 2.0, "memory": 1e9})
    monkeypatch.setattr("workbench.experiments.ray_sweep.import_ray", lambda: fake)
    before = tree(tmp_path)
    code = run_cli(kvwb_run_ray(tmp_path, *options))
    assert_one_line_and_nothing_written(code, capsys, tmp_path, before, asked)
    assert fake.submitted == 0 and fake.stopped  # the local cluster it started is stopped again


def test_a_joined_cluster_that_lacks_the_resources_is_waited_on_with_a_message_and_a_timeout(tmp_path, monkeypatch,
                                                                                              capsys):
    from workbench.experiments import ray_sweep
    from workbench.experiments.sweep import SweepConfig

    fake = FakeRay({"CPU": 2.0})
    monkeypatch.setattr(ray_sweep, "import_ray", lambda: fake)
    with pytest.raises(WorkbenchError, match="did not start the 50 workers within 600 s"):
        ray_sweep.run_sweep_ray("smollm2-135m", SweepConfig(n=1), tmp_path / "r", workers=50, address="auto",
                                progress=False)
    err = capsys.readouterr().err
    assert "ask Ray for 50 CPUs" in err and "waiting up to 600 s for it to scale up" in err
    assert fake.timeout == ray_sweep.SCALE_SECONDS and fake.stopped  # the driver disconnects
