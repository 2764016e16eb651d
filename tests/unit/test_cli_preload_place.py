"""Where the preloaded command line may listen, which commands go to it, and which code it
holds (docs/cli.md#the-preloaded-command-line)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from cairn.cli.preload import place
from cairn.cli.preload.handoff import interpreter_env


@pytest.mark.parametrize(
    ("args", "environ", "wanted"),
    [
        (["status", "RUN"], {}, True),
        (["--api-url", "worker", "status", "RUN"], {}, True),  # an option's value
        (["--help"], {}, True),
        (["worker"], {}, False),
        (["scheduler"], {}, False),
        (["api", "--port", "8000"], {}, False),
        (["dev"], {}, False),
        (["probe", "ready"], {}, False),
        (["status", "RUN"], {"CAIRN_CLI_PRELOAD": "0"}, False),
        (["status", "RUN"], {"CAIRN_CLI_PRELOAD": " Off "}, False),
        (["status", "RUN"], {"CAIRN_CLI_PRELOAD": "1"}, True),
    ],
)
def test_processes_of_their_own_and_a_user_who_says_no_are_never_handed_over(
    args: list[str], environ: dict[str, str], wanted: bool
) -> None:
    assert place.wanted(args, environ) is wanted


def test_the_socket_lives_in_a_folder_only_its_owner_may_enter() -> None:
    with tempfile.TemporaryDirectory(prefix="run-") as runtime:
        path = place.socket_path({"XDG_RUNTIME_DIR": runtime})
        assert path is not None and Path(path).parent == Path(runtime) / "cairn"
        assert (Path(runtime) / "cairn").stat().st_mode & 0o777 == 0o700


def test_a_folder_too_deep_for_a_socket_address_means_no_preloading(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    assert place.socket_path({"XDG_RUNTIME_DIR": str(deep)}) is None


def test_a_folder_others_may_enter_or_a_link_is_refused(tmp_path: Path) -> None:
    open_to_all = tmp_path / "open"
    (open_to_all / "cairn").mkdir(parents=True)
    (open_to_all / "cairn").chmod(0o755)
    assert place.socket_path({"XDG_RUNTIME_DIR": str(open_to_all)}) is None
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    linked = tmp_path / "linked"
    linked.mkdir()
    os.symlink(elsewhere, linked / "cairn")
    assert place.socket_path({"XDG_RUNTIME_DIR": str(linked)}) is None
    a_file = tmp_path / "file"
    a_file.mkdir()
    (a_file / "cairn").write_text("")
    assert place.socket_path({"XDG_RUNTIME_DIR": str(a_file)}) is None


def test_without_a_runtime_folder_the_socket_goes_under_tmp_per_user() -> None:
    with tempfile.TemporaryDirectory(prefix="tmp-") as temporary:
        path = place.socket_path({"TMPDIR": temporary})
        assert path is not None and Path(path).parent == Path(temporary) / f"cairn-{os.getuid()}"


def test_the_fingerprint_follows_every_module_of_the_package(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("A = 1\n")
    module = package / "sub" / "b.py"
    module.write_text("B = 1\n")
    (package / "sub" / "notes.txt").write_text("not code")
    before = place.fingerprint(str(package))
    assert place.fingerprint(str(package)) == before
    (package / "sub" / "notes.txt").write_text("still not code")
    assert place.fingerprint(str(package)) == before
    os.utime(module, ns=(1, 1))
    edited = place.fingerprint(str(package))
    assert edited != before
    (package / "c.py").write_text("")
    assert place.fingerprint(str(package)) not in (before, edited)


def test_the_preloaded_process_keeps_none_of_a_commands_settings_or_secrets() -> None:
    kept = interpreter_env(
        {
            "PATH": "/bin", "PYTHONPATH": "/code", "LC_ALL": "C.UTF-8", "VIRTUAL_ENV": "/venv",
            "CAIRN_CLI_PRELOAD_IDLE_S": "30", "CAIRN_DATABASE_URL": "postgresql://u:pw@db/x",
            "CAIRN_API_KEY": "cairn_secret", "AWS_SECRET_ACCESS_KEY": "s", "PGPASSWORD": "p",
        }
    )  # fmt: skip
    assert kept == {
        "PATH": "/bin", "PYTHONPATH": "/code", "LC_ALL": "C.UTF-8", "VIRTUAL_ENV": "/venv",
        "CAIRN_CLI_PRELOAD_IDLE_S": "30",
    }  # fmt: skip
