"""The fit() progress output (FitProgress) and the Tuner's table on the callback hooks,
driven through the same hooks the controller and the Tuner call."""

from __future__ import annotations

import io

from engine._internal.execution.callback_runner import CallbackRunner
from engine._internal.execution.progress import FitProgress
from engine._internal.execution.trial import Trial
from engine.tune._progress import ProgressReporter


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Result:
    def __init__(self, error=None, checkpoint=None):
        self.error, self.checkpoint = error, checkpoint


def _metrics(i: int) -> dict:
    return {"training_iteration": i, "loss": 1.0 / i, "accuracy": i / 10, "epoch": i,
            "lr": 0.1, "extra": 5, "nested": {"x": 1}, "note": "text", "flag": True,
            "time_total_s": 1.0, "trial_id": "t"}


def _drive(progress: FitProgress, n: int = 3) -> None:
    progress.on_run_start("run", {})
    for i in range(1, n + 1):
        progress.on_report(_metrics(i), [_metrics(i)])
    progress.on_run_end(_Result())


def _progress(out, verbose=1, kept=lambda: 2, score=None) -> FitProgress:
    return FitProgress("run", verbose, 2, "/runs/run", kept, score, out=out)


def test_plain_output_when_not_a_tty():
    out = io.StringIO()
    _drive(_progress(out))
    lines = out.getvalue().splitlines()
    assert lines[0] == "== run: 2 workers, run directory /runs/run"
    # Not a TTY: no cursor control; the first report gets a line, the last one too.
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()
    assert lines[1].startswith("[run] iter 1 | ")
    assert lines[-2].startswith("[run] iter 3 | loss 0.3333 accuracy 0.3 epoch 3 lr 0.1 |")
    assert lines[-2].endswith("| 2 ckpt")
    assert lines[-1].startswith("== run: finished after ")


def test_verbose_2_prints_every_report_once():
    out = io.StringIO()
    _drive(_progress(out, verbose=2), n=4)
    iters = [line.split(" | ")[0] for line in out.getvalue().splitlines()
             if line.startswith("[run]")]
    assert iters == ["[run] iter 1", "[run] iter 2", "[run] iter 3", "[run] iter 4"]


def test_verbose_0_prints_nothing():
    out = io.StringIO()
    _drive(_progress(out, verbose=0))
    assert out.getvalue() == ""


def test_tty_redraws_one_line_in_place(monkeypatch):
    import engine._internal.execution.progress as progress_mod

    monkeypatch.setattr(progress_mod, "TTY_PERIOD_S", 0.0)
    out = _Tty()
    _drive(_progress(out))
    text = out.getvalue()
    # Each report redraws the same line ("\r" + clear); at the end the final figures
    # are drawn once more and kept (a newline), then the summary.
    assert text.count("\r\x1b[K[run] iter ") == 4
    assert "\n\r\x1b[K[run] iter 1 |" in text
    lines = text.rstrip("\n").split("\n")
    assert lines[-2].rsplit("\r\x1b[K", 1)[-1].startswith("[run] iter 3 | loss 0.3333")
    assert lines[-1].startswith("== run: finished")


def test_score_attribute_first_and_only_plain_numbers():
    p = _progress(io.StringIO(), score="accuracy")
    shown = p.key_metrics(_metrics(2))
    assert list(shown) == ["accuracy", "loss", "epoch", "lr"]


def test_retry_and_failure_lines():
    out = io.StringIO()
    p = _progress(out)
    p.on_run_start("run", {})
    p.on_report(_metrics(1), [])
    p.on_retry(1)
    p.on_report(_metrics(2), [])
    p.on_run_end(_Result(error=RuntimeError("boom")))
    text = out.getvalue()
    assert "== run: worker group restarting (retry 1) from its latest checkpoint" in text
    assert "== run: FAILED after " in text


def test_a_broken_stream_disables_progress_not_the_run():
    class Broken(io.StringIO):
        def write(self, s):
            raise OSError("stdout closed")

    runner = CallbackRunner([_progress(Broken())])
    runner.call("on_run_start", "run", {})
    runner.call("on_report", _metrics(1), [])
    assert len(runner.errors) == 1 and "FitProgress.on_run_start" in runner.errors[0]


def test_tuner_table_is_driven_by_the_hooks():
    out = io.StringIO()
    reporter = ProgressReporter("exp", "loss", [("lr",)], out=out)
    trials = [Trial(trial_id=f"t{i}", trial_name=f"trial_{i}", config={"lr": 0.1 * i})
              for i in range(2)]
    for t, loss in zip(trials, (0.5, 0.25)):
        t.status = "TERMINATED"
        t.last_result = {"training_iteration": 3, "loss": loss}
    runner = CallbackRunner([reporter])
    runner.call("on_step_end", 1, trials)   # the first step prints a status line
    runner.call("on_experiment_end", trials)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("== Tuner exp: 2 trials (2 TERMINATED)")
    table = [line.split() for line in lines if line.startswith("trial_")]
    assert table == [["trial_0", "TERMINATED", "0", "3", "0.5"],
                     ["trial_1", "TERMINATED", "0.1", "3", "0.25"]]
