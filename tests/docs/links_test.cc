// The docs' links into the code stay true. README.md and docs/*.md link a function or class to
// the line that defines it: [`Reducer::autograd_hook`](ddp/reducer.cc#L204). Each such line
// must still hold the name (its last part, as a whole word); when code moves, run
// `python3 scripts/update_doc_links.py` to move the numbers. Pictures the pages show must exist.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <vector>

#include <catch2/catch.hpp>

namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<fs::path> pages() {
  std::vector<fs::path> out = {"README.md"};
  for (const auto& entry : fs::directory_iterator("docs")) {
    if (entry.path().extension() == ".md") out.push_back(entry.path());
  }
  return out;
}

struct CodeLink {
  fs::path page;
  std::string name, target;
  size_t line;
};

std::vector<CodeLink> code_links() {
  static const std::regex link(R"(\[`([A-Za-z_][\w:]*)(?:\(\))?`\]\(([^)#\s]+)#L(\d+)\))");
  std::vector<CodeLink> out;
  for (const fs::path& page : pages()) {
    const std::string text = read_file(page);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), link); it != std::sregex_iterator(); ++it) {
      out.push_back({page, (*it)[1], (*it)[2], std::stoul((*it)[3])});
    }
  }
  return out;
}

}  // namespace

TEST_CASE("docs: every code link points at a line that holds the linked name", "[docs]") {
  const std::vector<CodeLink> links = code_links();
  size_t in_readme = 0;
  for (const CodeLink& l : links) in_readme += l.page == "README.md";
  // README's walk of one gradient links each of its steps; docs/ddp.md links its tables.
  CHECK(in_readme >= 15);
  CHECK(links.size() >= 40);
  for (const CodeLink& l : links) {
    const fs::path file = (l.page.parent_path() / l.target).lexically_normal();
    INFO(l.page.string() << " links `" << l.name << "` to " << l.target << "#L" << l.line
                         << "; if the code moved, run python3 scripts/update_doc_links.py");
    REQUIRE(fs::exists(file));
    const std::vector<std::string> lines = lines_of(read_file(file));
    REQUIRE(l.line >= 1);
    REQUIRE(l.line <= lines.size());
    const std::string last = l.name.substr(l.name.rfind(':') == std::string::npos ? 0 : l.name.rfind(':') + 1);
    INFO("line " << l.line << ": " << lines[l.line - 1]);
    CHECK(std::regex_search(lines[l.line - 1], std::regex("\\b" + last + "\\b")));
  }
}

TEST_CASE("docs: the pictures the pages show exist", "[docs]") {
  static const std::regex image(R"(!\[[^\]]*\]\(([^)\s]+)\))");
  int images = 0;
  for (const fs::path& page : pages()) {
    const std::string text = read_file(page);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), image); it != std::sregex_iterator(); ++it) {
      ++images;
      INFO(page.string() << " shows " << (*it)[1]);
      CHECK(fs::exists((page.parent_path() / std::string((*it)[1])).lexically_normal()));
    }
  }
  CHECK(images >= 3);  // README's timeline; docs/ddp.md's timeline and loss curves
}
