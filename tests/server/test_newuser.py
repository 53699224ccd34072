"""test_newuser.py - what a new user of the server hit (issue 56): the messages of
range errors (max_tokens past the context names the max_tokens given; integers print
as integers), the access log (one line a request; -q quiets it) and no libmicrohttpd
noise when a client hangs up."""
import re
import socket
import time

import pytest
import requests

from conftest import STORIES, Server, need_model


@pytest.fixture(scope="module")
def srv(binary):
    s = Server(need_model(STORIES), "--parallel", "2", "--ctx", "512")
    yield s
    assert s.stop() == 0


def error_message(r, status):
    assert r.status_code == status, (r.status_code, r.text)
    return r.json()["error"]["message"]


def test_max_tokens_past_the_context_names_it(srv):
    r = requests.post(srv.url + "/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 510}, timeout=30)
    msg = error_message(r, 400)
    assert re.search(r"plus max_tokens \(510\) is more than the context of 512 tokens", msg), msg
    r = requests.post(srv.url + "/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5000}, timeout=30)
    assert "max_tokens (5000)" in error_message(r, 400)


def test_integer_ranges_print_as_integers(srv):
    r = requests.post(srv.url + "/v1/completions", json={"prompt": "Once", "max_tokens": 100000000}, timeout=30)
    msg = error_message(r, 400)
    assert "'max_tokens' is 100000000, outside [1, 16777216]" in msg, msg
    r = requests.post(srv.url + "/v1/completions", json={"prompt": "Once", "top_k": -3}, timeout=30)
    msg = error_message(r, 400)
    assert "'top_k' is -3, outside [0, 1073741824]" in msg, msg
    assert "e+" not in msg
    # a number that is not an integer keeps its fraction
    r = requests.post(srv.url + "/v1/completions", json={"prompt": "Once", "temperature": 2.5}, timeout=30)
    assert "'temperature' is 2.5, outside [0, 2]" in error_message(r, 400)
