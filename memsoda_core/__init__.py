"""memsoda core: long-term memory retrieval for LLM agents, framework-neutral.

Facts live in PostgreSQL + pgvector. `recall` runs its signals (vector similarity over
anchor-enriched fact embeddings, the entity anchor with a second hop, full-text keywords, recency,
the date window a question names, the conversation; `recall/signals/`) in statements run at once,
fuses them by Reciprocal Rank Fusion and renders a deterministic block for a prompt.
"""

from memsoda_core.async_memory import AsyncMemory
from memsoda_core.embedders import Embedder, LocalEmbedder, default_embedder
from memsoda_core.errors import (
    ArgumentTypeError,
    ConfidenceError,
    ConfigurationError,
    DateError,
    EmbedderMismatchError,
    EmbeddingError,
    EmptyFieldError,
    ExtractionError,
    ImportFormatError,
    IntervalError,
    InvalidTextError,
    LimitError,
    MemsodaError,
    NotFoundError,
    NotLiveError,
    ReadOnlyStoreError,
    SchemaError,
    ScopeError,
    StoreBusyError,
    StoreError,
    StoreUnavailableError,
    TextTooLongError,
    ValidationError,
)
from memsoda_core.forgetting.rules import ForgetReport, RetentionReport, RetentionRule
from memsoda_core.items.values import ItemInput, StoredItem
from memsoda_core.learning import (
    ExtractionRequest,
    Extractor,
    LangChainExtractor,
    LlamaIndexExtractor,
    OpenAIExtractor,
)
from memsoda_core.memory import Memory
from memsoda_core.models import (
    LITERAL,
    Entity,
    Episode,
    EpisodeInput,
    Fact,
    FactInput,
    FactPage,
    FactSource,
    ImportReport,
    Message,
    RecallResult,
    RejectedOperation,
    RememberResult,
    ScoredFact,
    SignalHit,
)
from memsoda_core.options import DEFAULT_OPTIONS, FIRST_PERSON_OPTIONS, RecallOptions
from memsoda_core.recall.profile import Profile
from memsoda_core.synthesis import OpenAISynthesizer, Synthesizer

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_OPTIONS",
    "FIRST_PERSON_OPTIONS",
    "LITERAL",
    "ArgumentTypeError",
    "AsyncMemory",
    "ConfidenceError",
    "ConfigurationError",
    "DateError",
    "Embedder",
    "EmbedderMismatchError",
    "EmbeddingError",
    "EmptyFieldError",
    "Entity",
    "Episode",
    "EpisodeInput",
    "ExtractionError",
    "ExtractionRequest",
    "Extractor",
    "Fact",
    "FactInput",
    "FactPage",
    "FactSource",
    "ForgetReport",
    "ImportFormatError",
    "ImportReport",
    "IntervalError",
    "InvalidTextError",
    "ItemInput",
    "LangChainExtractor",
    "LimitError",
    "LlamaIndexExtractor",
    "LocalEmbedder",
    "Memory",
    "MemsodaError",
    "Message",
    "NotFoundError",
    "NotLiveError",
    "OpenAIExtractor",
    "OpenAISynthesizer",
    "Profile",
    "ReadOnlyStoreError",
    "RecallOptions",
    "RecallResult",
    "RejectedOperation",
    "RememberResult",
    "RetentionReport",
    "RetentionRule",
    "SchemaError",
    "ScopeError",
    "ScoredFact",
    "SignalHit",
    "StoreBusyError",
    "StoreError",
    "StoreUnavailableError",
    "StoredItem",
    "Synthesizer",
    "TextTooLongError",
    "ValidationError",
    "default_embedder",
]
