package inference

// Real configurations for tests and benchmarks with random weights, copied from the
// models' config.json on the Hugging Face hub.

// SmolLM2_135M is HuggingFaceTB/SmolLM2-135M: Llama, 30 layers, 9 query and 3
// key/value heads of 64, tied embeddings.
func SmolLM2_135M() Config {
	return Config{
		ModelType:             "llama",
		Architectures:         []string{"LlamaForCausalLM"},
		HiddenSize:            576,
		IntermediateSize:      1536,
		NumHiddenLayers:       30,
		NumAttentionHeads:     9,
		NumKeyValueHeads:      3,
		HeadDim:               64,
		RMSNormEps:            1e-5,
		RopeTheta:             100000,
		TieWordEmbeddings:     true,
		VocabSize:             49152,
		MaxPositionEmbeddings: 8192,
		HiddenAct:             "silu",
		TorchDType:            "bfloat16",
		BOSTokenID:            TokenIDs{0},
		EOSTokenID:            TokenIDs{0},
		tieSet:                true,
	}
}

// Qwen3_0_6B is Qwen/Qwen3-0.6B: 28 layers, 16 query and 8 key/value heads of 128
// (wider than hidden_size/heads), q/k norms, tied embeddings.
func Qwen3_0_6B() Config {
	return Config{
		ModelType:             "qwen3",
		Architectures:         []string{"Qwen3ForCausalLM"},
		HiddenSize:            1024,
		IntermediateSize:      3072,
		NumHiddenLayers:       28,
		NumAttentionHeads:     16,
		NumKeyValueHeads:      8,
		HeadDim:               128,
		RMSNormEps:            1e-6,
		RopeTheta:             1000000,
		TieWordEmbeddings:     true,
		VocabSize:             151936,
		MaxPositionEmbeddings: 40960,
		HiddenAct:             "silu",
		TorchDType:            "bfloat16",
		BOSTokenID:            TokenIDs{151643},
		EOSTokenID:            TokenIDs{151645},
		tieSet:                true,
	}
}
