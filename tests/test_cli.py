"""The command line refuses bad cluster settings with a message naming them (before anything starts)."""

from __future__ import annotations

import pytest

from concentrator.cli import build_parser


@pytest.mark.parametrize(("args", "message"), [
    (["--spark-conf", "executor.memory=2g"], "write spark.KEY=VALUE"),
    (["--spark-conf", "spark.executor.memory"], "write spark.KEY=VALUE"),
    (["--rules-on", "workers"], "invalid choice: 'workers'"),
])
def test_bad_spark_settings_are_refused(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve", *args])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_good_spark_settings() -> None:
    args = build_parser().parse_args(["serve", "--spark-conf", "spark.executor.memory=2g", "--spark-conf",
                                      "spark.driver.host=10.0.0.4", "--rules-on", "executors"])
    assert dict(args.spark_conf) == {"spark.executor.memory": "2g", "spark.driver.host": "10.0.0.4"}
    assert args.rules_on == "executors"
