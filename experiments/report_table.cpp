// Compact tables of a run and the --verbose key dump (experiments/report_table.h).
#include "experiments/report_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "core/util/error.h"

namespace statecheck {

ReportTable::ReportTable(std::string title, std::vector<std::string> columns)
    : title_(std::move(title)), columns_(std::move(columns)) {
  if (columns_.empty()) fail("table '{}': no columns", title_);
  left_.assign(columns_.size(), false);
  left_[0] = true;
}

void ReportTable::align_left(size_t column) {
  if (column >= columns_.size())
    fail("table '{}': no column {} ({} columns)", title_, column, columns_.size());
  left_[column] = true;
}

void ReportTable::add_row(std::vector<std::string> cells) {
  if (cells.size() != columns_.size())
    fail("table '{}': row {} has {} cells for {} columns", title_, rows_.size(), cells.size(),
         columns_.size());
  rows_.push_back(std::move(cells));
}

std::string ReportTable::render() const {
  std::vector<size_t> width(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    width[c] = columns_[c].size();
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s = " ";
    for (size_t c = 0; c < cells.size(); ++c)
      s += fmt::format(left_[c] ? "{}{:<{}}" : "{}{:>{}}", c == 0 ? " " : "  ", cells[c],
                       c + 1 == cells.size() && left_[c] ? 0 : width[c]);
    return s + "\n";
  };
  std::string out = title_ + "\n" + line(columns_);
  for (const auto& row : rows_) out += line(row);
  return out;
}

void ReportTable::print() const {
  fmt::print("{}", render());
  std::fflush(stdout);
}

std::string report_number(double value) {
  if (value == 0.0) return "0";
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return fmt::format("{:.4g}", value);
}

std::string render_summary_keys(const Summary& summary, const std::string& title) {
  std::string out = title + ":\n";
  for (const auto& [k, v] : summary.values()) out += fmt::format("  {:<56} {:.6g}\n", k, v);
  return out;
}

}  // namespace statecheck
