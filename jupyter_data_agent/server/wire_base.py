"""What every reply of the server API is (``models``, ``proposal_models``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from ..turn.events import API_VERSION


class Reply(BaseModel):
    """What the server sends: every field is present, defaults included."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


class Versioned(Reply):
    """A reply that names the API version first."""

    version: Literal[1] = API_VERSION
