package extract

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/xuri/excelize/v2"
)

// xlsx reads an Excel workbook with excelize, one sheet after another, each
// row as a line of "header: value" pairs with the cells formatted as Excel
// shows them (dates as dates, not serial numbers). The zip container is
// checked against the limits before excelize inflates it.
func (x *extractor) xlsx(raw []byte) (Document, error) {
	if _, err := x.openZip(raw); err != nil {
		return Document{}, err
	}
	f, err := excelize.OpenReader(bytes.NewReader(raw), excelize.Options{
		UnzipSizeLimit:    x.lim.MaxUnzipBytes,
		UnzipXMLSizeLimit: x.lim.MaxUnzipBytes, // keep every part in memory: no temporary files
	})
	if err != nil {
		if errors.Is(err, excelize.ErrWorkbookPassword) || errors.Is(err, excelize.ErrUnsupportedEncryptMechanism) {
			return Document{}, fmt.Errorf("%w: a password-protected workbook", ErrEncrypted)
		}
		return Document{}, fmt.Errorf("workbook: %w", err)
	}
	defer f.Close()
	sheets := f.GetSheetList()
	if len(sheets) > x.lim.MaxEntries {
		return Document{}, fmt.Errorf("%w: %d sheets, over the limit of %d", ErrTooLarge, len(sheets), x.lim.MaxEntries)
	}
	var doc Document
	for _, name := range sheets {
		rows, err := f.Rows(name)
		if err != nil {
			return Document{}, fmt.Errorf("sheet %s: %w", name, err)
		}
		sh := x.newSheet(name)
		for n := 0; rows.Next(); n++ {
			if n%1024 == 0 {
				if err := x.ctx.Err(); err != nil {
					rows.Close()
					return Document{}, err
				}
			}
			cells, err := rows.Columns()
			if err == nil {
				err = sh.add(cells)
			}
			if err != nil {
				rows.Close()
				return Document{}, fmt.Errorf("sheet %s: %w", name, err)
			}
		}
		err = rows.Error()
		rows.Close()
		if err != nil {
			return Document{}, fmt.Errorf("sheet %s: %w", name, err)
		}
		doc.Sections = append(doc.Sections, sh.done()...)
	}
	doc.Pages = len(sheets)
	return doc, nil
}
