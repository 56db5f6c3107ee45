package trainer

import (
	"context"
	"fmt"
	"os"

	"github.com/inloop/inloop/inference"
	"github.com/inloop/inloop/inference/chat"
	"github.com/inloop/inloop/inference/tokenizer"
	"github.com/inloop/inloop/training/data"
)

// The kinds of data path a run reads.
const (
	DataJSONL     = "jsonl"     // one JSONL file in an mlx-lm format
	DataSplits    = "splits"    // a folder with train.jsonl and optionally valid.jsonl, test.jsonl
	DataDocuments = "documents" // a folder of the user's documents, chunked
)

// Dataset is a data path read for one model: the examples of each split, and what
// was wrong with the rows or files left out.
type Dataset struct {
	Kind               string
	Train, Valid, Test []data.Example
	Report             *data.Report   // per-line problems of JSONL files; nil for documents
	Warnings           []string       // for a person: bad rows, skipped documents, no chat template
	Files              int            // documents read
	Verdicts           []data.Verdict // documents: every file of the folder and what became of it
	ChunkSize          int            // tokens per document chunk
	PadID              int32          // the model's end-of-text id, used to pad batches
	Tokenizer          *tokenizer.Tokenizer
}

// LoadDataset reads path (a JSONL file, a split folder or a documents folder) with
// the tokenizer and chat template of the model folder modelDir. chunkSize 0 means
// the default, capped by maxSeqLength. A dataset whose rows were all unusable comes
// back with its warnings and an error.
func LoadDataset(modelDir, path string, chunkSize, maxSeqLength int) (*Dataset, error) {
	return LoadDatasetProgress(context.Background(), modelDir, path, chunkSize, maxSeqLength, nil)
}

// LoadDatasetProgress is LoadDataset reporting a documents folder's reading
// to progress after each file (when not nil); ctx stops the reading.
func LoadDatasetProgress(ctx context.Context, modelDir, path string, chunkSize, maxSeqLength int, progress func(data.ScanProgress)) (*Dataset, error) {
	tok, err := tokenizer.Load(modelDir)
	if err != nil {
		return nil, err
	}
	d := &Dataset{Tokenizer: tok}
	eos := -1
	if ids := tok.EOS(); len(ids) > 0 {
		eos = ids[0]
	} else if mc, err := inference.ReadConfig(modelDir); err == nil && len(mc.StopTokens()) > 0 {
		eos = mc.StopTokens()[0]
	}
	opt := data.Options{Tokenizer: tok, AppendEOS: eos >= 0, EOS: eos}
	if tmpl, err := chat.LoadTemplate(modelDir); err == nil {
		opt.Renderer = renderer{tmpl}
	} else {
		d.Warnings = append(d.Warnings, fmt.Sprintf("chat template: %v (chat rows will be refused)", err))
	}
	if eos >= 0 {
		d.PadID = int32(eos)
	}
	st, err := os.Stat(path)
	if err != nil {
		return d, fmt.Errorf("trainer: data: %w", err)
	}
	switch {
	case st.IsDir() && data.IsSplitDir(path):
		d.Kind = DataSplits
		var sp *data.Splits
		sp, d.Report, err = data.LoadSplits(path, opt)
		if err == nil {
			if sp.Train == nil {
				err = fmt.Errorf("trainer: %s has no train.jsonl", path)
			} else {
				d.Train = sp.Train.Examples
				if sp.Valid != nil {
					d.Valid = sp.Valid.Examples
				}
				if sp.Test != nil {
					d.Test = sp.Test.Examples
				}
			}
		}
	case st.IsDir():
		d.Kind = DataDocuments
		d.ChunkSize = chunkSize
		if d.ChunkSize == 0 {
			d.ChunkSize = min(data.DefaultChunkOptions.Size, max(maxSeqLength, 1))
		}
		co := data.ChunkOptions{Size: d.ChunkSize, Overlap: d.ChunkSize / 8}
		if id, ok := tok.BOS(); ok {
			co.Prefix = []int{id}
		}
		var c *data.Corpus
		if c, err = data.NewCorpus(path, tok, co); err == nil {
			if _, err = c.ScanContext(ctx, progress); err == nil {
				d.Train, d.Files, d.Verdicts = c.Examples(), len(c.Files()), c.Verdicts()
				for _, s := range c.Skipped() {
					d.Warnings = append(d.Warnings, "skipped "+s.Error())
				}
				if len(d.Train) == 0 {
					err = fmt.Errorf("trainer: %s: %w", path, data.ErrNoExamples)
				}
			}
		}
	default:
		d.Kind = DataJSONL
		var set *data.Set
		set, d.Report, err = data.LoadJSONL(path, opt)
		if err == nil {
			d.Train = set.Examples
		}
	}
	if d.Report != nil && (len(d.Report.Issues) > 0 || len(d.Report.Warnings) > 0) {
		d.Warnings = append(d.Warnings, "data: "+d.Report.String())
	}
	return d, err
}
