"""The OpenAI-compatible client against a real HTTP server on loopback, through the openai SDK."""

import time

import pytest

pytest.importorskip("openai", reason="openai not installed (pip install 'kernelpro[llm]')")

from loopback_llm import LoopbackLLM  # noqa: E402

from kernelpro.agent.llm import Budget, BudgetExhausted, LLMClient, LLMConfig, load_config  # noqa: E402
from kernelpro.errors import KernelProError  # noqa: E402

MSG = [{"role": "user", "content": "x" * 400}]


def client(srv, budget=None, **kw):
    cfg = LLMConfig(base_url=srv.base_url, model="test-model", backoff_s=0.01, timeout_s=10,
                    price_in_per_mtok=1.0, price_out_per_mtok=4.0, **kw)
    return LLMClient(cfg, budget)


def test_normal_reply_and_token_accounting():
    with LoopbackLLM([("reply", "hello " * 40)]) as srv:
        c = client(srv)
        r = c.chat(MSG)
        assert r.ok and r.text.startswith("hello") and r.finish_reason == "stop"
        assert r.prompt_tokens == 100 and r.completion_tokens == 60
        r2 = c.chat(MSG)
        assert r2.ok
    u = c.usage
    assert (u.calls, u.replies, u.failures) == (2, 2, 0)
    assert (u.prompt_tokens, u.completion_tokens, u.tokens) == (200, 120, 320)
    assert u.cost_usd == pytest.approx((200 * 1.0 + 120 * 4.0) / 1e6)
    req = srv.requests[0]
    assert req["model"] == "test-model" and req["messages"] == MSG and req["max_tokens"] == 16384


@pytest.mark.parametrize("kind", ["garbage", "nochoices"])
def test_malformed_reply_is_a_failed_reply_not_a_crash(kind):
    with LoopbackLLM([(kind,)]) as srv:
        c = client(srv, max_retries=1)
        r = c.chat(MSG)
    assert not r.ok and r.reason.startswith("malformed reply")
    assert r.attempts == 2 and c.usage.failures == 1


def test_truncated_reply_is_flagged():
    with LoopbackLLM([("reply", "```python\nclass ModelNew:\n    def f(", "length")]) as srv:
        r = client(srv).chat(MSG)
    assert r.ok and r.truncated and r.finish_reason == "length"


def test_500s_then_success_retries_with_backoff():
    with LoopbackLLM([("status", 500), ("status", 503), ("reply", "fine")]) as srv:
        c = client(srv, max_retries=4)
        t0 = time.monotonic()
        r = c.chat(MSG)
    assert r.ok and r.text == "fine" and r.attempts == 3
    assert len(srv.requests) == 3 and c.usage.calls == 3
    assert time.monotonic() - t0 >= 0.01  # backed off at least once


def test_4xx_is_not_retried():
    with LoopbackLLM([("status", 400), ("reply", "never")]) as srv:
        r = client(srv, max_retries=4).chat(MSG)
    assert not r.ok and "rejected (400)" in r.reason and len(srv.requests) == 1


def test_rate_limit_is_retried():
    with LoopbackLLM([("status", 429), ("reply", "ok now")]) as srv:
        r = client(srv).chat(MSG)
    assert r.ok and r.attempts == 2


def test_dead_endpoint_gives_reason_after_retries():
    with LoopbackLLM([("reply", "first"), ("die",)]) as srv:
        c = client(srv, max_retries=2)
        assert c.chat(MSG).ok
        r = c.chat(MSG)    # the server shuts down during this request
        assert not r.ok and "endpoint unreachable" in r.reason and r.attempts == 3
        r = c.chat(MSG)
        assert not r.ok and "endpoint unreachable" in r.reason


def test_token_budget_is_hard():
    with LoopbackLLM([("reply", "y" * 800)]) as srv:   # 100 prompt + 200 completion tokens per call
        c = client(srv, budget=Budget(max_tokens=400))
        assert c.chat(MSG).ok and c.usage.tokens == 300
        assert c.chat(MSG).ok
        # each request asked only for what the budget had left
        assert [r["max_tokens"] for r in srv.requests] == [400, 100]
        with pytest.raises(BudgetExhausted, match="token budget"):
            c.chat(MSG)
    assert len(srv.requests) == 2


def test_call_and_time_budgets():
    with LoopbackLLM([("reply", "a")]) as srv:
        c = client(srv, budget=Budget(max_calls=2))
        c.chat(MSG)
        c.chat(MSG)
        with pytest.raises(BudgetExhausted, match="call budget"):
            c.chat(MSG)
        c2 = client(srv, budget=Budget(max_seconds=0.0))
        with pytest.raises(BudgetExhausted, match="time budget"):
            c2.chat(MSG)


def test_config_precedence(tmp_path, monkeypatch):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[llm]\nbase_url = "http://file/v1"\nmodel = "file-model"\napi_key = "k-file"\ntemperature = 0.2\n')
    monkeypatch.delenv("KERNELPRO_BASE_URL", raising=False)
    monkeypatch.delenv("KERNELPRO_API_KEY", raising=False)
    monkeypatch.setenv("KERNELPRO_MODEL", "env-model")
    c = load_config(None, None, None, str(cfg))
    assert (c.base_url, c.model, c.api_key, c.temperature) == ("http://file/v1", "env-model", "k-file", 0.2)
    c = load_config("http://flag/v1", "flag-model", "k", str(cfg))
    assert (c.base_url, c.model, c.api_key) == ("http://flag/v1", "flag-model", "k")
    monkeypatch.delenv("KERNELPRO_MODEL")
    with pytest.raises(KernelProError, match="needs an endpoint"):
        load_config(None, None, None, None)
    bad = tmp_path / "bad.toml"
    bad.write_text("[llm\n")
    with pytest.raises(KernelProError, match="not a valid TOML"):
        load_config(None, None, None, str(bad))
