"""Learning from the conversation (`remember`): the window, the extractors, the prompt and the
schema of their answer, and the checks every proposed operation passes before it is written."""

from memsoda_core.learning.extractors import (
    Extractor,
    ExtractorLike,
    LangChainExtractor,
    LlamaIndexExtractor,
    OpenAIExtractor,
    as_extractor,
)
from memsoda_core.learning.prompt import PROMPT_VERSION, ExtractionRequest, load_prompt, render_prompt
from memsoda_core.learning.schema import extraction_schema

__all__ = [
    "PROMPT_VERSION",
    "ExtractionRequest",
    "Extractor",
    "ExtractorLike",
    "LangChainExtractor",
    "LlamaIndexExtractor",
    "OpenAIExtractor",
    "as_extractor",
    "extraction_schema",
    "load_prompt",
    "render_prompt",
]
