"""Completion records (recipe/records.py): an output counts as done only with its record, written
last; without one (a kill, a full disk, a crash mid-write) it is redone, saying so in one line;
a record made with other settings is refused, naming the setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megatron_scale.recipe import records
from megatron_scale.recipe.settings import SettingsError
from megatron_scale.recipe.steps import Command, actions
from tests.recipe._env import made, make_outputs, settings

HF = {"HF_MODEL": "/m/llama", "METHODS": "full", "KO_TRAIN_INPUT": "/raw/ko.jsonl", "KO_EVAL_INPUT": "/raw/kv.jsonl",
      "EN_EVAL_INPUT": "/raw/en.jsonl"}


def _resolve(s, key: str) -> Command | str:  # type: ignore[no-untyped-def]
    (action,) = [a for a in actions(s) if str(a.key) == key]
    return action.resolve()


def test_an_output_without_its_record_is_redone_saying_so(tmp_path: Path) -> None:
    s = settings(tmp_path, **HF)
    first = _resolve(s, "base")
    assert isinstance(first, Command) and first.note == ""  # nothing there: nothing to say
    make_outputs(first)  # a converted base, but the run was killed before its record
    again = _resolve(s, "base")
    assert isinstance(again, Command) and again.args == first.args
    assert again.note.startswith(f"{tmp_path / 'ckpt' / 'base'}: no completion record")
    assert "redoing it" in again.note and "\n" not in again.note
    made(s, "base")
    assert _resolve(s, "base") == f"converted: {tmp_path / 'ckpt' / 'base'}"


def test_a_truncated_output_does_not_match_its_record_and_is_redone(tmp_path: Path) -> None:
    s = settings(tmp_path, **HF)
    made(s, "data-ko_train_text_document")
    (tmp_path / "data" / "ko_train_text_document.idx").write_bytes(b"")  # what a full disk leaves
    got = _resolve(s, "data-ko_train_text_document")
    assert isinstance(got, Command) and "does not match its completion record" in got.note
    assert "ko_train_text_document.idx has 0 bytes, recorded 1" in got.note


def test_a_record_made_with_other_settings_is_refused_naming_the_setting(tmp_path: Path) -> None:
    made(settings(tmp_path, **HF, TP="1"), "base")
    with pytest.raises(SettingsError) as e:
        _resolve(settings(tmp_path, **HF, TP="2"), "base")
    msg = str(e.value)
    assert "ckpt/base was made with other settings" in msg and "--tensor-model-parallel-size 1 (recorded), 2 (now)" in msg
    assert (tmp_path / "ckpt" / "base" / "config.json").is_file()  # nothing deleted


def test_a_moved_work_dir_still_matches_its_records(tmp_path: Path) -> None:
    made(settings(tmp_path / "a", **HF), "base")
    rec = json.loads(records.record_path(tmp_path / "a", "base").read_text())
    assert "$WORKDIR/ckpt/base" in rec["settings"] and list(rec["outputs"]) == ["$WORKDIR/ckpt/base"]
    (tmp_path / "a").rename(tmp_path / "b")
    assert _resolve(settings(tmp_path / "b", **HF), "base") == f"converted: {tmp_path / 'b' / 'ckpt' / 'base'}"


def test_the_launcher_clears_what_was_left_then_records_what_it_made(tmp_path: Path) -> None:
    from megatron_scale.recipe.command import Launch
    from megatron_scale.recipe.launch import Launcher

    env = {"WORKDIR": str(tmp_path), "SCALE_REPO": str(tmp_path), **HF}
    s = settings(tmp_path, **HF)
    left = tmp_path / "data" / "ko_train_text_document.bin"
    left.parent.mkdir(parents=True)
    left.write_bytes(b"half")  # a killed preprocessing's output, no record
    seen = []

    class Tool:
        def __init__(self, argv: list[str], env: dict[str, str]) -> None:
            seen.append((argv, left.exists()))
            prefix = argv[argv.index("--output-prefix") + 1]
            for ext in ("bin", "idx"):
                Path(f"{prefix}_text_document.{ext}").write_bytes(b"whole")

        def wait(self) -> int:
            return 0

    L = Launcher(s, Launch.from_env(env), env, spawn=Tool)
    command = L.begin(1)
    assert command is not None and "no completion record" in command.note
    records.clear(s.workdir, "data-ko_train_text_document", command.outputs)
    assert L._launch(command) == 0 and seen == [(seen[0][0], False)]  # launched on a clean slate
    records.write(s.workdir, "data-ko_train_text_document", command.args, command.outputs)
    assert L.begin(1) is None
