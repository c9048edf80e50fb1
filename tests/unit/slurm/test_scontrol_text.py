"""scontrol text read in one pass, dumps filtered by id, many commands in one process, and
the run listing. Real recordings of every version: ``tests/fixtures/<v>/testbed/``."""

import pytest

from ccadapter.slurm.formats.listing import parse_listing
from ccadapter.slurm.formats.records import ParseContext
from ccadapter.slurm.formats.scontrol import (
    Batch,
    iter_records,
    parse_scontrol_jobs,
    record_fields,
    show_job,
    write_script,
)
from tests.conftest import fixture_text

CTX = ParseContext("24.11.5", "scontrol show job -d")


def test_fields_in_one_pass_and_free_text_cannot_pose_as_fields():
    record = ("JobId=7 ArrayJobId=5 ArrayTaskId=2 JobName=evil UserId=x(1) =y\n"
              "   UserId=alice(1000) GroupId=staff(50) MCS_label=N/A\n"
              "   JobState=RUNNING Reason=None Dependency=(null)\n"
              "   Comment=JobState=COMPLETED UserId=mallory(0)\n"
              "   WorkDir=/home/a b/StartTime=1\n"
              "     Nodes=n1 CPU_IDs=0-1 Mem=0 GRES=\n")
    fields, details, name = record_fields(record)
    assert name == "evil UserId=x(1) =y"
    assert fields["UserId"] == "alice(1000)" and fields["JobState"] == "RUNNING"
    assert fields["ArrayJobId"] == "5" and fields["ArrayTaskId"] == "2"
    assert fields["Comment"] == "JobState=COMPLETED UserId=mallory(0)"
    assert fields["WorkDir"] == "/home/a b/StartTime=1" and "StartTime" not in fields
    assert details == ["Nodes=n1 CPU_IDs=0-1 Mem=0 GRES="]


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_a_dump_is_filtered_by_id_before_reading(version):
    text = fixture_text(version, "testbed/scontrol-d-busy.txt")
    everything, errors = parse_scontrol_jobs(text, CTX)
    assert not errors and len(everything) > 5
    wanted = set(sorted(everything)[1:3])
    seen: list[int | None] = []
    for job_id, _ in iter_records(text.splitlines(), wanted):
        seen.append(job_id)
    assert set(seen) == wanted  # the other records were skipped, never assembled
    some, _ = parse_scontrol_jobs(iter(text.splitlines()), CTX, wanted)
    assert some == {i: everything[i] for i in wanted}


def test_cluster_headers_of_a_multi_cluster_answer_are_not_records():
    text = ("CLUSTER: c1\nJobId=3 JobName=a\n   JobState=RUNNING\n\n"
            "CLUSTER: c2\nNo jobs in the system\n")
    jobs, errors = parse_scontrol_jobs(text, CTX)
    assert list(jobs) == [3] and errors == []


def _answer(batch: Batch, outputs: list[str], *, echo: bool = True, stop_after: int | None = None
            ) -> str:
    """What scontrol prints for the batch, given each command's own output."""
    out = []
    for k, (command, answer) in enumerate(zip(batch.commands, outputs, strict=True)):
        if stop_after is not None and k >= stop_after:
            break
        out.append(f"scontrol: {command}\n" if echo else "")
        out.append(answer)
        out.append(f"scontrol: show hostnames {batch.marker}-{k}\n" if echo else "")
        out.append(f"{batch.marker}-{k}\n")
    return "".join(out) + ("scontrol: " if echo else "")


@pytest.mark.parametrize("echo", [True, False])
def test_one_process_answers_are_cut_by_markers(echo):
    batch = Batch.of([show_job(5), show_job(999), write_script(5), write_script(6)])
    tricky = ("#!/bin/sh\necho 'scontrol: show hostnames x'\n"
              f"echo {batch.marker}\nJobId=1 JobName=fake\n")
    no_newline = "#!/bin/sh\nsleep 1"  # the echo follows on the same line
    record = "JobId=5 JobName=a\n   JobState=RUNNING\n\n"
    out = _answer(batch, [record, "", tricky, no_newline], echo=echo)
    assert batch.answers(out) == [record, "", tricky, no_newline]
    assert batch.stdin().splitlines() == [
        "show job 5", f"show hostnames {batch.marker}-0", "show job 999",
        f"show hostnames {batch.marker}-1", "write batch_script 5 -",
        f"show hostnames {batch.marker}-2", "write batch_script 6 -",
        f"show hostnames {batch.marker}-3"]


def test_a_process_that_died_early_leaves_the_rest_unanswered():
    batch = Batch.of([show_job(5), write_script(5), write_script(6)])
    out = _answer(batch, ["JobId=5 JobName=a\n", "#!/bin/sh\n", ""], stop_after=1)
    assert batch.answers(out) == ["JobId=5 JobName=a\n", None, None]


@pytest.mark.parametrize("echo", [True, False])
def test_complete_only_once_the_last_marker_itself_is_printed(echo):
    batch = Batch.of([show_job(5), write_script(5)])
    out = _answer(batch, ["JobId=5 JobName=a\n", "#!/bin/sh\n"], echo=echo)
    cut = out.rindex(f"{batch.marker}-1\n")  # the marker's own output (after its echo)
    assert batch.complete(out) and batch.complete(out[:cut + len(batch.marker) + 3])
    assert not batch.complete(out[:cut])  # its echo only: the answer may not be all there
    assert not batch.complete(out[:cut + len(batch.marker) + 2])  # no line end yet
    assert Batch.of([]).complete("")


def test_a_long_lived_process_prints_its_prompt_in_either_answer():
    """The prompt after one question's last marker may be read with that answer or at the
    start of the next question's: the next answers are the same either way."""
    batch = Batch.of([show_job(5), write_script(5)])
    out = _answer(batch, ["JobId=5 JobName=a\n", "#!/bin/sh\n"])
    assert out.startswith("scontrol: show job 5\n")
    for start in (out, out.removeprefix("scontrol: ")):
        assert batch.answers(start) == ["JobId=5 JobName=a\n", "#!/bin/sh\n"]


def test_markers_differ_per_batch():
    assert Batch.of(["show job 1"]).marker != Batch.of(["show job 1"]).marker


def test_listing_lines():
    out = ("12|12|1795425711|1795425712|COMPLETED|n1\n"
           "13|13|None|1795425733|CANCELLED by 0|None assigned\n"
           "14|14|1795425800|Unknown|RUNNING|n[1-2]\n"
           "7|7|1795425711|1795425711|CANCELLED by 0|None assigned\n"
           "x|x|1|2|RUNNING|n1\n"
           "15|15|soon|Unknown|RUNNING|n1\n"
           "18|1795425711|1795425712|COMPLETED|n1\n"  # without JobID: refused
           "20|20+0|1795425800|Unknown|RUNNING|n1\n"
           "21|20+1|1795425800|Unknown|RUNNING|n2\n"
           "17|16_1|1795425800|Unknown|RUNNING|n2\n")
    stamps, errors = parse_listing(out, ParseContext("22.05.8", "sacct -P"))
    by_id = {s.job_id: s for s in stamps}
    assert by_id[12].finished and by_id[12].started and by_id[12].run == (12, 1795425711)
    assert not by_id[13].started and by_id[13].state == "CANCELLED"
    assert by_id[14].started and not by_id[14].finished and by_id[14].nodes == "n[1-2]"
    assert not by_id[7].started  # 22.05 prints End as Start of a never-started job
    assert len(errors) == 3 and "22.05.8" in str(errors[0]) and "job 15" in str(errors[1])
    assert "18|" in str(errors[2]) and 18 not in by_id
    # a line naming its job is asked again by id; one naming none cannot be
    assert [e.job_id for e in errors] == [None, 15, 18]
    assert [str(by_id[i].het) for i in (20, 21)] == ["20+0", "20+1"]
    assert by_id[21].het.job_id == 21
    assert by_id[12].het is None and by_id[17].het is None  # a job, an array task
