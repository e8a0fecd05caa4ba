"""The open loop's release of prepared requests (loadgen/release.py): nothing goes before its
instant, a released burst is written before any of its answers is read, and a member that
never writes (cancelled, refused) does not keep the others yielding."""

from __future__ import annotations

import gevent
import gevent.pool
import pytest

from loadgen.release import Member, Release


def _request(name: str, member: Member, log: list[str], *, write: bool = True) -> None:
    member.wait()
    log.append(f"send {name}")
    if write:
        member.written()
        log.append(f"read {name}")
    member.settle()


def test_members_wait_for_the_release_and_the_burst_is_written_before_any_read() -> None:
    release, log = Release(), []
    group = gevent.pool.Group()
    for name in "abcd":
        group.spawn(_request, name, release.member(), log)
    gevent.sleep(0.01)
    assert log == [] and release.unwritten == 4 and not release.released
    release.release()
    group.join(timeout=5)
    assert log[:4] == ["send a", "send b", "send c", "send d"]
    assert sorted(log[4:]) == ["read a", "read b", "read c", "read d"]
    assert release.unwritten == 0


def test_a_member_that_never_writes_still_settles_and_settling_twice_counts_once() -> None:
    release, log = Release(), []
    quiet = release.member()
    group = gevent.pool.Group()
    group.spawn(_request, "x", quiet, log, write=False)
    group.spawn(_request, "y", release.member(), log)
    release.release()
    group.join(timeout=5)
    assert log == ["send x", "send y", "read y"]
    quiet.settle()
    assert release.unwritten == 0


def test_a_member_joining_after_the_release_goes_at_once() -> None:
    release = Release()
    release.release()
    member = release.member()
    with gevent.Timeout(1):
        member.wait()
    member.written()  # alone: nothing to yield to
    assert release.unwritten == 0


@pytest.mark.parametrize("members", [1, 3])
def test_the_last_writer_does_not_yield(members: int) -> None:
    release = Release()
    joined = [release.member() for _ in range(members)]
    release.release()
    for member in joined[:-1]:
        member.settle()
    switched = []
    other = gevent.spawn(switched.append, "other ran")
    joined[-1].written()  # nobody left to write: no yield, so `other` has not run yet
    assert switched == []
    other.join()
