"""The wire types of "Connect a model" (``server.connect_handlers``) and of the model ``GET config`` names.

An API key travels only in a request body (never a query string, which servers log), and
no reply carries it: ``ConnectRequest.api_key`` is left out of its repr and of every reply.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .wire_base import Reply, Versioned


class ModelInfo(Reply):
    """The model that answers, in words a newcomer reads in the sidebar (``llm.factory.model_info``)."""

    model_config = ConfigDict(title="ModelInfo")

    name: str  # "SmolLM2-135M-Instruct", "llama3.2:3b", a GGUF file's name
    # embedded: the small model shipped in the wheel; openai: an endpoint; local: a model this server loads
    kind: Literal["embedded", "openai", "local"]
    note: str  # "small and weak at code", "at 127.0.0.1:11434", "llama.cpp on this server"


class ModelServer(Reply):
    """One place looked at for an OpenAI-compatible server, and what it serves."""

    model_config = ConfigDict(title="ModelServer")

    label: str  # "Ollama", "LM Studio", ... or "The URL you typed"
    base_url: str  # credentials in the URL masked
    models: list[str]  # GET <base_url>/models; empty when it did not answer
    error: str  # "" when it answered; else what went wrong, in words


class ModelServers(Versioned):
    """``GET connect/servers`` (this machine's usual ports) or ``POST connect/models`` (one URL)."""

    servers: list[ModelServer]
    elapsed_s: float


class ConnectRequest(BaseModel):
    """``POST connect/models``, ``connect/check`` and ``connect``: an endpoint, a model, maybe a key."""

    model_config = ConfigDict(extra="forbid", title="ConnectRequest")

    version: Literal[1] = 1
    base_url: str = Field(min_length=1, max_length=2000)
    model: str = Field("", max_length=500)  # required by check and connect
    # Goes to the server only: written to the server-side config file (0600), never sent back.
    api_key: str = Field("", max_length=4000, repr=False)


class ConnectCheck(Versioned):
    """``POST connect/check``: whether the model answered a real one-token chat request."""

    ok: bool
    message: str
    elapsed_s: float


class Connected(Versioned):
    """``POST connect``: the setting written, and whether this server already uses it."""

    path: str  # the config file written
    applied: bool  # False: JupyterLab must restart to use it
    message: str
    model_info: ModelInfo
    # c.DataAgent traits another config layer sets, which win over the file at the next start.
    overridden: list[str]
