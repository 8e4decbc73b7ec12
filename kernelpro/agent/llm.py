"""An OpenAI-compatible chat client (vLLM, SGLang, Ollama, llama.cpp server, hosted APIs).

Goes through the official `openai` SDK (imported lazily, so the LLM-free policy never needs it). Our
own retry loop (exponential backoff with jitter) replaces the SDK's, so every attempt is counted and
bounded by the budget. `chat` never raises for a bad reply or a dead endpoint: it returns a `Reply`
with ok=False and a one-line reason, which the search records as a failed expansion. Only an
exhausted budget raises (`BudgetExhausted`), because that ends the search.
"""

from __future__ import annotations

import os
import random
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelpro.errors import KernelProError


class BudgetExhausted(Exception):
    """The hard budget (calls, tokens or wall time) is spent; the search stops cleanly."""


@dataclass
class LLMConfig:
    base_url: str
    model: str
    api_key: str = "EMPTY"                  # local servers (vLLM, llama.cpp) accept any key
    temperature: float = 0.7
    max_tokens: int = 16384                 # per reply; lowered to what the token budget has left
    timeout_s: float = 600.0
    max_retries: int = 4
    backoff_s: float = 1.0
    price_in_per_mtok: float = 0.0          # USD per million prompt tokens, for cost accounting
    price_out_per_mtok: float = 0.0


@dataclass
class Budget:
    max_calls: int | None = None
    max_tokens: int | None = None
    max_seconds: float | None = None
    started: float = field(default_factory=time.monotonic)

    def seconds_left(self) -> float | None:
        return None if self.max_seconds is None else self.max_seconds - (time.monotonic() - self.started)


@dataclass
class Usage:
    calls: int = 0            # requests that reached the endpoint (every attempt)
    replies: int = 0          # usable replies
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class Reply:
    ok: bool
    text: str = ""
    reason: str = ""          # why not ok (one line)
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    attempts: int = 0

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


def load_config(args_base_url: str | None = None, args_model: str | None = None, args_key: str | None = None,
                config_path: str | None = None) -> LLMConfig:
    """Flags over environment (KERNELPRO_BASE_URL, KERNELPRO_MODEL, KERNELPRO_API_KEY, OPENAI_API_KEY)
    over the TOML config file ([llm] table; --config, $KERNELPRO_CONFIG or ~/.config/kernelpro/config.toml).
    """
    path = Path(config_path or os.environ.get("KERNELPRO_CONFIG") or
                Path.home() / ".config" / "kernelpro" / "config.toml")
    file_cfg: dict[str, Any] = {}
    if path.is_file():
        try:
            file_cfg = tomllib.loads(path.read_text()).get("llm", {})
        except (tomllib.TOMLDecodeError, OSError) as e:
            raise KernelProError(f"{path}: not a valid TOML config ({e}); fix it or pass --config") from None
    elif config_path:
        raise KernelProError(f"config file {config_path} not found")
    base_url = args_base_url or os.environ.get("KERNELPRO_BASE_URL") or file_cfg.get("base_url")
    model = args_model or os.environ.get("KERNELPRO_MODEL") or file_cfg.get("model")
    key = (args_key or os.environ.get("KERNELPRO_API_KEY") or file_cfg.get("api_key")
           or os.environ.get("OPENAI_API_KEY") or "EMPTY")
    if not base_url or not model:
        raise KernelProError("the LLM policy needs an endpoint: pass --base-url URL --model NAME (or set "
                             "KERNELPRO_BASE_URL/KERNELPRO_MODEL, or an [llm] table in the config file); "
                             "or use --policy param")
    known = set(LLMConfig.__dataclass_fields__) - {"base_url", "model", "api_key"}
    extra = {k: v for k, v in file_cfg.items() if k in known}
    return LLMConfig(base_url=str(base_url), model=str(model), api_key=str(key), **extra)


class LLMClient:
    """Thread-safe accounting around one OpenAI-compatible endpoint."""

    def __init__(self, config: LLMConfig, budget: Budget | None = None):
        self.config = config
        self.budget = budget or Budget()
        self.usage = Usage()
        self._lock = threading.Lock()
        self._client = None

    def _sdk(self) -> Any:
        if self._client is None:
            try:
                import openai
            except ImportError:
                raise KernelProError("the LLM policy needs the `openai` package: `pip install 'kernelpro[llm]'` "
                                     "(or use --policy param)") from None
            self._client = openai.OpenAI(base_url=self.config.base_url, api_key=self.config.api_key,
                                         timeout=self.config.timeout_s, max_retries=0)
        return self._client

    def check_budget(self) -> None:
        b, u = self.budget, self.usage
        if b.max_calls is not None and u.calls >= b.max_calls:
            raise BudgetExhausted(f"call budget spent ({u.calls}/{b.max_calls})")
        if b.max_tokens is not None and u.tokens >= b.max_tokens:
            raise BudgetExhausted(f"token budget spent ({u.tokens}/{b.max_tokens})")
        left = b.seconds_left()
        if left is not None and left <= 0:
            raise BudgetExhausted(f"time budget spent ({b.max_seconds:.0f}s)")

    def _account(self, prompt: int, completion: int) -> None:
        with self._lock:
            self.usage.prompt_tokens += prompt
            self.usage.completion_tokens += completion
            self.usage.cost_usd += (prompt * self.config.price_in_per_mtok
                                    + completion * self.config.price_out_per_mtok) / 1e6

    def chat(self, messages: list[dict[str, str]], max_tokens: int | None = None) -> Reply:
        """One completion, with retries on transient errors. Raises only BudgetExhausted."""
        self._sdk()  # raises KernelProError with the install hint if openai is missing
        want = max_tokens or self.config.max_tokens
        last_reason = ""
        attempts = 0
        for attempt in range(self.config.max_retries + 1):
            self.check_budget()
            b = self.budget
            if b.max_tokens is not None:
                want = max(1, min(want, b.max_tokens - self.usage.tokens))
            timeout = self.config.timeout_s
            left = b.seconds_left()
            if left is not None:
                timeout = max(1.0, min(timeout, left))
            with self._lock:
                self.usage.calls += 1
            attempts += 1
            t0 = time.monotonic()
            retry, reply = self._attempt(messages, want, timeout)
            reply.latency_s, reply.attempts = time.monotonic() - t0, attempts
            if reply.ok:
                with self._lock:
                    self.usage.replies += 1
                return reply
            last_reason = reply.reason
            if not retry:
                break
            if attempt < self.config.max_retries:
                delay = self.config.backoff_s * (2 ** attempt) * (0.5 + random.random() / 2)
                if left is not None:
                    delay = min(delay, max(0.0, left - 1))
                time.sleep(delay)
        with self._lock:
            self.usage.failures += 1
        if attempts > 1:
            last_reason = f"{last_reason} (after {attempts} attempts)"
        return Reply(False, reason=last_reason, attempts=attempts)

    def _attempt(self, messages: list[dict[str, str]], max_tokens: int, timeout: float) -> tuple[bool, Reply]:
        """(retryable, reply) for one HTTP request."""
        import openai

        try:
            resp = self._sdk().chat.completions.create(
                model=self.config.model, messages=messages, temperature=self.config.temperature,
                max_tokens=max_tokens, timeout=timeout)
        except (openai.APITimeoutError, openai.APIConnectionError) as e:
            return True, Reply(False, reason=f"endpoint unreachable: {type(e).__name__}: {str(e)[:160]}")
        except openai.RateLimitError as e:
            return True, Reply(False, reason=f"rate limited (429): {str(e)[:160]}")
        except openai.InternalServerError as e:
            return True, Reply(False, reason=f"server error ({e.status_code}): {str(e)[:160]}")
        except openai.APIStatusError as e:
            # 4xx other than 429: the request itself is wrong (model name, context length, key).
            return False, Reply(False, reason=f"request rejected ({e.status_code}): {str(e)[:200]}")
        except openai.APIResponseValidationError as e:
            return True, Reply(False, reason=f"malformed reply: {str(e)[:160]}")
        except Exception as e:  # noqa: BLE001 - any SDK surprise is one failed attempt, never a crash
            return True, Reply(False, reason=f"malformed reply: {type(e).__name__}: {str(e)[:160]}")
        return self._parse(resp)

    def _parse(self, resp: Any) -> tuple[bool, Reply]:
        usage = getattr(resp, "usage", None)
        pt = int(getattr(usage, "prompt_tokens", 0) or 0) if usage else 0
        ct = int(getattr(usage, "completion_tokens", 0) or 0) if usage else 0
        self._account(pt, ct)
        if isinstance(resp, str | bytes) or not getattr(resp, "choices", None):
            return True, Reply(False, reason="malformed reply: no choices in the response",
                               prompt_tokens=pt, completion_tokens=ct)
        choice = resp.choices[0]
        msg = getattr(choice, "message", None)
        text = getattr(msg, "content", None) if msg is not None else None
        finish = getattr(choice, "finish_reason", None)
        if not isinstance(text, str) or not text.strip():
            return True, Reply(False, reason="malformed reply: empty message content", finish_reason=finish,
                               prompt_tokens=pt, completion_tokens=ct)
        # A truncated reply is returned as ok with finish_reason='length'; code extraction decides
        # whether anything usable survived, and reports 'truncated' otherwise.
        return False, Reply(True, text=text, finish_reason=finish, prompt_tokens=pt, completion_tokens=ct)
