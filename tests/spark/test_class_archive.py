"""The driver JVM's class-data archive: where it lives, when a driver maps or dumps it, and that
it appears whole or not at all (pipelines/spark/class_archive.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.spark import class_archive
from pipelines.spark.session import _add_driver_files, delta_jars, kafka_jars, s3a_jars


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(class_archive.ARCHIVE_ENV, raising=False)
    monkeypatch.delenv(class_archive.DUMP_ENV, raising=False)
    return tmp_path / "cache"


@pytest.mark.parametrize("value", ["off", "OFF", "0", "false", "no"])
def test_the_archive_is_switched_off_by_the_environment(cache: Path, value: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(class_archive.ARCHIVE_ENV, value)
    assert class_archive.archive_path([]) is None
    assert class_archive.driver_java_options([]) == ""


def test_the_archive_lives_in_the_cache_named_after_spark_and_a_hash(cache: Path) -> None:
    path = class_archive.archive_path(["/x/delta-spark.jar"])
    assert path is not None
    assert path.parent == cache / "topic-replay" / "jvm"
    assert path.name.startswith("spark-") and path.suffix == ".jsa"


def test_other_jars_name_another_archive(cache: Path) -> None:
    assert (class_archive.archive_path(["/x/delta-spark.jar"])
            != class_archive.archive_path(["/x/delta-spark.jar", "/x/kafka-clients.jar"]))


def test_a_file_named_by_the_environment_is_the_archive(cache: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(class_archive.ARCHIVE_ENV, str(tmp_path / "mine.jsa"))
    assert class_archive.archive_path([]) == tmp_path / "mine.jsa"


def test_no_archive_yet_adds_no_option(cache: Path) -> None:
    assert class_archive.driver_java_options([]) == ""


def test_an_existing_archive_is_mapped_quietly(cache: Path) -> None:
    path = class_archive.archive_path([])
    assert path is not None
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    assert class_archive.driver_java_options([]) == (f"-XX:SharedArchiveFile={path} "
                                                     f"{class_archive.QUIET}")


def test_the_builder_asks_the_jvm_to_dump_its_classes(cache: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(class_archive.DUMP_ENV, str(tmp_path / "x.jsa.tmp-1"))
    assert class_archive.driver_java_options([]) == (
        f"-XX:ArchiveClassesAtExit={tmp_path / 'x.jsa.tmp-1'} {class_archive.QUIET}")


def test_a_dumped_archive_is_published_by_one_rename(tmp_path: Path) -> None:
    dumped, target = tmp_path / "a.jsa.tmp-7", tmp_path / "jvm" / "a.jsa"
    dumped.write_bytes(b"classes")
    assert class_archive.publish(dumped, target)
    assert target.read_bytes() == b"classes" and not dumped.exists()


@pytest.mark.parametrize("content", [None, b""])
def test_no_or_an_empty_dump_publishes_nothing(tmp_path: Path, content: bytes | None) -> None:
    dumped, target = tmp_path / "a.jsa.tmp-7", tmp_path / "a.jsa"
    if content is not None:
        dumped.write_bytes(content)
    assert not class_archive.publish(dumped, target)
    assert not target.exists()


def test_the_driver_options_come_after_the_callers(cache: Path) -> None:
    path = class_archive.archive_path(_jars())
    assert path is not None
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    settings = {"spark.driver.extraJavaOptions": "-Xmx1g"}
    _add_driver_files(settings)
    assert settings["spark.driver.extraJavaOptions"] == (
        f"-Xmx1g -XX:SharedArchiveFile={path} {class_archive.QUIET}")


def _jars() -> list[str]:
    return [*delta_jars(), *s3a_jars(), *kafka_jars()]
