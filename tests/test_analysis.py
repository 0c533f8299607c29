"""A text's analysis for search: bounded, and off the event loop when it is long."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from baton.server.retrieval import analysis
from baton.server.retrieval.analysis import (
    INLINE_CHARS,
    MAX_DOCUMENT_TERMS,
    Analysis,
    Analyzer,
    counted,
)
from tests.conftest import REPO

pytestmark = pytest.mark.anyio

LONG = " ".join(f"w{n}" for n in range(200_000))  # about 1.4 MB, every word distinct


def analysis_processes() -> list[psutil.Process]:
    return [
        child
        for child in psutil.Process().children()
        if "multiprocessing.spawn" in " ".join(child.cmdline())
    ]


async def test_a_long_text_is_analysed_while_the_event_loop_answers_others() -> None:
    """A long text's analysis runs elsewhere: a short one asked after it is answered while
    it is still under way (on the event loop, the long one would have finished first, the
    loop answering nobody meanwhile), and its answer is the one the loop would give."""
    analyzer = Analyzer(None)
    long_one = asyncio.create_task(analyzer.analyse(LONG))
    await asyncio.sleep(0)  # it has started
    short = await analyzer.analyse("the deploy ships on fridays")
    assert not long_one.done()
    assert short == Analysis(*counted("the deploy ships on fridays"), b"")
    assert await long_one == Analysis(*counted(LONG), b"")


async def test_a_document_gives_the_index_its_first_terms_only() -> None:
    """However long the text, a document is analysed on its first ``MAX_DOCUMENT_TERMS``
    distinct terms, in the order they appear, each counted; past the last, nothing is
    read."""
    text = "alpha " * 3 + LONG
    counts, length = counted(text)
    assert len(counts) == MAX_DOCUMENT_TERMS
    assert counts["alpha"] == 3
    assert f"w{MAX_DOCUMENT_TERMS - 2}" in counts
    assert f"w{MAX_DOCUMENT_TERMS - 1}" not in counts
    assert length == 3 + MAX_DOCUMENT_TERMS - 1
    assert (await Analyzer(None).analyse(text)).counts == counts


async def test_the_analysis_process_killed_is_replaced() -> None:
    """The analysis process killed (out of memory, a signal): the next long text is
    analysed by a new one, and its answer is whole."""
    analyzer = Analyzer(None)
    await analyzer.analyse("x" * (INLINE_CHARS + 1))
    [process] = analysis_processes()
    os.kill(process.pid, signal.SIGKILL)
    process.wait(10)
    assert await analyzer.analyse(LONG) == Analysis(*counted(LONG), b"")
    assert [each.pid for each in analysis_processes()] != [process.pid]
    assert analysis._pool is not None


def test_the_analysis_process_ends_with_its_parent_killed(tmp_path: Path) -> None:
    """A Baton process killed (SIGKILL: no exit handler runs) takes its analysis process with
    it: none is left behind holding memory."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import asyncio, sys, time\n"
        "from baton.server.retrieval.analysis import Analyzer\n"
        "LONG = 'x' * 20000\n"
        "async def main():\n"
        "    await Analyzer(None).analyse(LONG)\n"
        "    print('analysed', flush=True)\n"
        "    time.sleep(60)\n"
        "if __name__ == '__main__':\n"
        "    asyncio.run(main())\n"
    )
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, cwd=REPO, env=os.environ
    )
    assert parent.stdout is not None
    assert parent.stdout.readline() == b"analysed\n"
    children = psutil.Process(parent.pid).children(recursive=True)
    [worker] = [child for child in children if "spawn_main" in " ".join(child.cmdline())]
    parent.kill()
    parent.wait()
    worker.wait(10)  # psutil.TimeoutExpired if it were left behind
    assert not worker.is_running()
