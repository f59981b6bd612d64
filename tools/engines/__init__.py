"""Engine adapters: launch commands of vLLM, SGLang and TensorRT-LLM read as plans and written from them, and the
conformance corpus of published commands they must round-trip."""
