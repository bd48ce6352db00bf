"""A close the page reconnects after (RETRY, 4503: in the application's range, which is all
autobahn takes from it) on a real daphne (docs/contract.md §4, Live delivery)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed

from conversations.live.watcher import RETRY
from tests.conftest import start_daphne
from tests.live.test_live_e2e import Api, LiveClient, open_socket, operator_cookie, text

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def test_a_socket_whose_promised_report_never_comes_closes_for_a_reconnect(
    tmp_path: Path, token: str
) -> None:
    server = start_daphne(tmp_path, {"REPLAY_REPORT_WAIT_SECONDS": "1"})
    api = Api(server, token)
    try:
        conversation_id = api.conversation()
        client = LiveClient(server.url, conversation_id, operator_cookie())
        ws = open_socket(
            client.ws_url + "&report=1",
            {"Cookie": f"sessionid={client.cookie}", "Origin": server.url},
        )
        started = time.monotonic()
        api.message(conversation_id, "user", text("a change it must wait for"))
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                ws.recv(timeout=5)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == RETRY
        assert time.monotonic() - started < 5
        # Reconnecting and reporting, as the page does, brings what it waited for.
        client.connect()
        client.wait_for_record(timeout=10)
        assert client.counts() == {0: 1}
    finally:
        api.close()
        server.stop()
    log = server.log.read_text(errors="replace")
    assert "closing a socket whose resume report did not come" in log, log
    assert "Traceback" not in log, log
