"""batchgate's reference server: a paged-KV engine with three batching policies.

Importing the package does not import torch; the model runner is built lazily by the Engine.
"""

from reference_server.async_engine import AsyncEngine
from reference_server.block_manager import BlockManager, BlockManagerStats
from reference_server.config import POLICIES, BatchingConfig, ClassConfig, EngineConfig
from reference_server.engine import Engine, ModelRunnerLike
from reference_server.errors import (
    AdmissionError,
    ConfigError,
    EngineDeadError,
    EngineError,
    EngineFailure,
    RequestValidationError,
)
from reference_server.hf_tokenizer_files import hf_tokenizer_dir
from reference_server.outputs import FINISH_REASONS, EngineStats, RequestOutput, StepResult
from reference_server.sampling_params import SamplingParams
from reference_server.scheduler import Scheduler, SchedulerOutput
from reference_server.sequence import PRIORITY_CLASSES, ScheduledChunk, Sequence, SequenceStatus
from reference_server.step_record import StepLog, StepRecord

__all__ = [
    "FINISH_REASONS",
    "POLICIES",
    "PRIORITY_CLASSES",
    "AdmissionError",
    "AsyncEngine",
    "BatchingConfig",
    "BlockManager",
    "BlockManagerStats",
    "ClassConfig",
    "ConfigError",
    "Engine",
    "EngineConfig",
    "EngineDeadError",
    "EngineError",
    "EngineFailure",
    "EngineStats",
    "ModelRunnerLike",
    "RequestOutput",
    "RequestValidationError",
    "SamplingParams",
    "ScheduledChunk",
    "Scheduler",
    "SchedulerOutput",
    "Sequence",
    "SequenceStatus",
    "StepLog",
    "StepRecord",
    "StepResult",
    "hf_tokenizer_dir",
]
