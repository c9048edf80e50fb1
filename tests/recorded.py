"""Slurm commands recorded exactly as the collector ran them, and replayed to it.

:class:`RecordingRunner` wraps the real :class:`~ccadapter.slurm.runner.SlurmRunner` on the
test bed (``tests/testbed/record_fixtures.py``) and keeps every command the collector runs:
its argv, the environment it set, what it wrote to scontrol's standard input, and the
answer. :class:`Replay` answers the same commands from such a recording, so unit tests
read the real text of every form the collector parses (the run listing, ``sacct --json -j``,
one scontrol process answering many commands, ``scontrol -o show node``), nothing rendered.

The only thing that differs between two runs of the same questions is the random marker
that cuts a scontrol process's output into answers; it is stored as ``@MARKER@`` and put
back on replay. Recorded questions asked in another grouping (the fast path's scripts,
asked beside its jobs) are answered line by line from the recording (:meth:`Replay._regrouped`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ccadapter.slurm.formats.scontrol import ECHO, Batch
from ccadapter.slurm.runner import Completed, SlurmRunner

_MARKER = re.compile(r"ccadapter-[0-9a-f]{16}")
PLACEHOLDER = "@MARKER@"


class RecordingRunner:
    """A SlurmRunner that keeps every command and its answer."""

    def __init__(self, inner: SlurmRunner) -> None:
        self.inner = inner
        self.commands: list[dict[str, Any]] = []

    def run(self, argv: Sequence[str], *, retry: bool = True, timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> str:
        out = self.inner.run(argv, retry=retry, timeout=timeout, env=env)
        self.commands.append({"argv": list(argv), "env": dict(env or {}), "stdout": out})
        return out

    def unchecked(self, argv: Sequence[str], *, stdin: str | None = None,
                  timeout: float | None = None,
                  env: Mapping[str, str] | None = None) -> Completed:
        done = self.inner.unchecked(argv, stdin=stdin, timeout=timeout, env=env)
        self._keep(argv, stdin, env, done)
        return done

    def _keep(self, argv: Sequence[str], stdin: str | None, env: Mapping[str, str] | None,
              done: Completed) -> None:
        marker = _MARKER.search(stdin or "")
        strip = (lambda text: text.replace(marker[0], PLACEHOLDER)) if marker else str
        self.commands.append({"argv": list(argv), "env": dict(env or {}),
                              "stdin": strip(stdin or ""), "stdout": strip(done.stdout),
                              "stderr": done.stderr, "returncode": done.returncode})

    def ask(self, argv: Sequence[str], stdin: str, complete: Callable[[str], bool], *,
            timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> Completed:
        done = self.inner.ask(argv, stdin, complete, timeout=timeout, env=env)
        self._keep(argv, stdin, env, done)
        return done

    def lines(self, argv: Sequence[str], *, timeout: float | None = None,
              env: Mapping[str, str] | None = None) -> Iterator[str]:
        lines = list(self.inner.lines(argv, timeout=timeout, env=env))
        self.commands.append({"argv": list(argv), "env": dict(env or {}),
                              "stdout": "".join(lines), "lines": True})
        yield from lines

    def save(self, path: Path, **meta: Any) -> None:
        path.write_text(json.dumps({**meta, "commands": self.commands}, indent=1,
                                   ensure_ascii=False) + "\n", encoding="utf-8")


class Replay:
    """Answers the commands of a recording; an unrecorded command is a test failure."""

    def __init__(self, recording: Mapping[str, Any]) -> None:
        self.recording = recording
        self._has_local = any("--local" in e["argv"] for e in recording["commands"])
        self._has_tz = any("TZ" in e.get("env", {}) for e in recording["commands"])
        self.calls: Counter[str] = Counter()
        self.argvs: list[list[str]] = []

    def _find(self, argv: Sequence[str], **match: Any) -> dict[str, Any]:
        self.calls[argv[0]] += 1
        self.argvs.append(list(argv))
        wanted = self._as_recorded(list(argv))
        if "env" in match:
            match["env"] = self._env_as_recorded(match["env"])
        for entry in self.recording["commands"]:
            if entry["argv"] == wanted and all(entry.get(k) == v for k, v in match.items()):
                return entry
        raise AssertionError(f"not recorded: {list(argv)} {match or ''}")

    def _as_recorded(self, argv: list[str]) -> list[str]:
        """The fixtures were recorded before the collector asked about jobs with
        ``--local`` (:func:`~ccadapter.slurm.controller.jobs_scope`). Outside a federation,
        which no test bed cluster is in, slurmctld's answer is the same with or without it:
        without it, scontrol finds the cluster in no federation and sets ``SHOW_LOCAL``
        itself (src/api/job_info.c ``slurm_load_job``, 22.05.8:1479-1485). So where a
        recording never has the flag, it is left out of the match; :attr:`argvs` keeps
        the argv as the collector gave it."""
        if "--local" not in argv or self._has_local:
            return argv
        return [a for a in argv if a != "--local"]

    def _env_as_recorded(self, env: dict[str, str]) -> dict[str, str]:
        """The fixtures were recorded before the collector ran its listings with
        ``TZ=UTC0`` (issue 35, item 9a), on machines running in UTC: the bounds the
        collector writes in UTC are the text recorded, and the answers are the same. Where
        a recording never has TZ, ``TZ=UTC0`` is left out of the match."""
        if self._has_tz or env.get("TZ") != "UTC0":
            return env
        return {k: v for k, v in env.items() if k != "TZ"}

    def run(self, argv: Sequence[str], *, retry: bool = True, timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> str:
        return self._find(argv, env=dict(env or {}))["stdout"]

    def unchecked(self, argv: Sequence[str], *, stdin: str | None = None,
                  timeout: float | None = None,
                  env: Mapping[str, str] | None = None) -> Completed:
        marker = _MARKER.search(stdin or "")
        assert marker, stdin
        asked = (stdin or "").replace(marker[0], PLACEHOLDER)
        try:
            entry = self._find(argv, stdin=asked, env=dict(env or {}))
        except AssertionError:
            entry = self._regrouped(argv, asked, dict(env or {}))
        return Completed(entry["stdout"].replace(PLACEHOLDER, marker[0]), entry["stderr"],
                         entry["returncode"])

    def _regrouped(self, argv: Sequence[str], stdin: str, env: dict[str, str]) -> dict[str, Any]:
        """Questions that were recorded, asked in another grouping (the fast path asks a
        part's batch scripts of a second scontrol, beside its jobs): each command answered
        as the recording has it (cut per command by :meth:`Batch.answers`, as the product
        cuts it), in the process's own form (the command's echo, its answer, the echoed
        marker and its output). slurmctld's errors, which scontrol writes to stderr per
        process, not per command, are left out."""
        wanted = self._as_recorded(list(argv))
        answers: dict[str, str] = {}
        for entry in self.recording["commands"]:
            if entry["argv"] == wanted and entry.get("stdin") and entry["env"] == env:
                recorded = _batch(entry["stdin"])
                for command, text in zip(recorded.commands, recorded.answers(entry["stdout"]),
                                         strict=True):
                    if text is not None:
                        answers.setdefault(command, text)
        asked = _batch(stdin)
        missing = [c for c in asked.commands if c not in answers]
        assert not missing, f"not recorded: {list(argv)} {missing}"
        out = "".join(f"{ECHO}{command}\n{answers[command]}"
                      f"{ECHO}show hostnames {asked.marker}-{k}\n{asked.marker}-{k}\n"
                      for k, command in enumerate(asked.commands))
        return {"stdout": out, "stderr": "", "returncode": 0}

    def ask(self, argv: Sequence[str], stdin: str, complete: Callable[[str], bool], *,
            timeout: float | None = None,
            env: Mapping[str, str] | None = None) -> Completed:
        """As a long-lived scontrol answers: like :meth:`unchecked`."""
        return self.unchecked(argv, stdin=stdin, timeout=timeout, env=env)

    def lines(self, argv: Sequence[str], *, timeout: float | None = None,
              env: Mapping[str, str] | None = None) -> Iterator[str]:
        entry = self._find(argv, lines=True, env=dict(env or {}))
        yield from entry["stdout"].splitlines(keepends=True)

    def answers(self, program: str) -> list[dict[str, Any]]:
        """The recorded commands of one program (for parser tests on their real text)."""
        return [e for e in self.recording["commands"] if e["argv"][0] == program]



def _batch(stdin: str) -> Batch:
    """The :class:`Batch` whose stdin this is, with the recording's marker: its commands
    alternate with the markers' ``show hostnames``."""
    return Batch.of(stdin.splitlines()[::2], PLACEHOLDER)
