// What a run prints for a person: a compact table per experiment (the figures that answer its
// question), with every summary key kept for the summary file and shown only on request
// (--verbose). Experiments build a ReportTable from the values they just measured and print it at
// the end of their run, so that `statecheck <experiment>` and `statecheck suite` show the same
// table.
#pragma once

#include <string>
#include <vector>

#include "core/io/summary.h"

namespace statecheck {

class ReportTable {
 public:
  // `title`: the experiment and what the rows are ("codec: error per codec"); `columns`: the
  // header of each column, first the row label (units in the header, e.g. "bytes/state").
  ReportTable(std::string title, std::vector<std::string> columns);

  // Aligns column `column` (0-based; the first column always is) to the left instead of the right,
  // for text columns. Throws statecheck::Error for a column the table does not have.
  void align_left(size_t column);

  // One row: exactly one cell per column (throws statecheck::Error naming the table and the row
  // index otherwise). Cells are text; format numbers with report_number.
  void add_row(std::vector<std::string> cells);

  // The table as text: the title line, the header, the rows; the first column (and those given to
  // align_left) left-aligned, the others right-aligned, each as wide as its widest cell, two spaces
  // indented, '\n' after each line.
  std::string render() const;
  // Prints render() on stdout.
  void print() const;

 private:
  std::string title_;
  std::vector<std::string> columns_;
  std::vector<bool> left_;
  std::vector<std::vector<std::string>> rows_;
};

// A number for a table cell: "0" for an exact zero (a codec that makes no error must not read as
// a tiny number), "nan" / "inf" / "-inf", otherwise 4 significant digits ("%.4g").
std::string report_number(double value);

// The summary keys and values of one experiment, one per line (the former key dump), for
// --verbose: "`title`:" then "  key  value" in key order, values with 6 significant digits.
std::string render_summary_keys(const Summary& summary, const std::string& title);

}  // namespace statecheck
