// Input and output paths (core/io/paths.h): outputs that would destroy something or that the file
// system cannot hold are refused before any work, created folders are removed unless kept, and
// whole files are replaced atomically.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "core/io/hdf5_file.h"
#include "core/io/paths.h"
#include "tests/error_of.h"
#include "tests/temp_dir.h"

using namespace statecheck;
using statecheck::test_support::error_of;
using statecheck::test_support::temp_path;
namespace fs = std::filesystem;

// Output paths that would destroy something are refused before anything is written; inputs must
// be regular files (a FIFO would block the run).
TEST(Paths, OutputsThatWouldDestroySomethingAreRefused) {
  const std::string dir = temp_path("paths");
  fs::create_directories(dir);
  const std::string fifo = dir + "/fifo", input = dir + "/states.safetensors",
                    plain = dir + "/plain";
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::ofstream(input) << "x";
  std::ofstream(plain) << "x";
  const std::vector<InputPath> inputs = {{"--states", input}};
  EXPECT_NE(error_of([&] {
              check_output_file("--out", fifo, inputs);
            }).find("--out " + fifo + ": exists and is not a regular file"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              check_output_file("--out", dir, inputs);
            }).find("--out " + dir + ": is a directory"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              check_output_file("--out", dir + "/./states.safetensors", inputs);
            }).find("is the same file as --states " + input),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              check_output_file("--out", plain + "/x.h5", inputs);
            }).find(plain + " is not a directory"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { check_output_file("--out", plain, inputs); }), "");
  EXPECT_EQ(error_of([&] { check_output_file("--out", dir + "/new/x.h5", inputs); }), "");
  // The result writer refuses the FIFO itself, before creating anything.
  EXPECT_NE(error_of([&] { H5Writer w(fifo); }).find("not a regular file"), std::string::npos);
  EXPECT_FALSE(fs::exists(fifo + ".partial"));
  EXPECT_TRUE(fs::is_fifo(fifo));

  EXPECT_NE(error_of([&] {
              check_input_file("--trace", fifo);
            }).find("--trace " + fifo + ": not a regular file"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_input_file("--trace", dir); }).find("is a directory"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_input_file("--trace", dir + "/none"); }).find("no such file"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { check_input_file("--trace", input); }), "");
}

TEST(Paths, PartialFilesAndSpellingsAreChecked) {
  const std::string dir = temp_path("paths2");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string out = dir + "/r.h5", target = dir + "/target";
  std::ofstream(target) << "keep";
  fs::create_symlink(target, out + ".partial");
  // A link where the partial file goes would be written through.
  EXPECT_NE(error_of([&] {
              check_output_file("--out", out, {});
            }).find(out + ".partial exists and is not a regular file"),
            std::string::npos);
  EXPECT_NE(error_of([&] { H5Writer w(out); }).find("not a regular file"), std::string::npos);
  EXPECT_NE(error_of([&] { write_file_atomically(out, "x"); }).find("not a regular file"),
            std::string::npos);
  std::ifstream in(target);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()),
            "keep");
  // An input at the partial name would be consumed by the final rename.
  std::ofstream(dir + "/n.json.partial") << "{}";
  EXPECT_NE(error_of([&] {
              check_output_file("--out", dir + "/n.json", {{"--model", dir + "/n.json.partial"}});
            }).find("is the same file as --model"),
            std::string::npos);
  // A file at the partial name that this run did not make is refused and left as it was.
  const std::string other = dir + "/o.h5";
  std::ofstream(other + ".partial") << "user data";
  for (const std::string& e :
       {error_of([&] { check_output_file("--out", other, {}); }),
        error_of([&] { H5Writer w(other); }), error_of([&] { write_file_atomically(other, "x"); })})
    EXPECT_NE(e.find(other + ".partial exists (left by a killed run"), std::string::npos) << e;
  std::ifstream kept(other + ".partial");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>()),
            "user data");
  EXPECT_FALSE(fs::exists(other));
  // One path spelled two ways, neither existing yet.
  EXPECT_TRUE(same_file(dir + "/new/./x.h5", dir + "/new/sub/../x.h5"));
  EXPECT_FALSE(same_file(dir + "/new/x.h5", dir + "/new/y.h5"));
  // A trailing '/' names a directory.
  EXPECT_NE(
      error_of([&] { check_output_file("--out", dir + "/newdir/", {}); }).find("names a directory"),
      std::string::npos);
  EXPECT_FALSE(fs::exists(dir + "/newdir"));
}

// CreatedDirectories removes only what it made, only if empty, and nothing once kept.
TEST(Paths, CreatedDirectoriesAreRemovedWhenEmptyUnlessKept) {
  const std::string root = temp_path("made");
  fs::remove_all(root);
  fs::create_directories(root);
  { CreatedDirectories d("test", root + "/a/b/c"); }
  EXPECT_TRUE(fs::is_directory(root));  // existed before: untouched
  EXPECT_FALSE(fs::exists(root + "/a"));
  {
    CreatedDirectories d("test", root + "/a/b");
    std::ofstream(root + "/a/b/f") << "x";
  }
  EXPECT_TRUE(fs::exists(root + "/a/b/f"));  // not empty: kept
  fs::remove_all(root + "/a");
  {
    CreatedDirectories d("test", root + "/a/b");
    d.keep();
  }
  EXPECT_TRUE(fs::is_directory(root + "/a/b"));
  std::ofstream(root + "/file") << "x";
  const std::string e = error_of([&] { CreatedDirectories d("--out x", root + "/file/sub"); });
  EXPECT_NE(e.find("--out x: cannot create directory " + root + "/file/sub"), std::string::npos)
      << e;
}

TEST(Paths, AtomicWriteReplacesWholeFilesOnly) {
  const std::string path = temp_path("atomic/summary.json");
  write_file_atomically(path, "first\n");
  write_file_atomically(path, "second\n");
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "second\n");
  EXPECT_FALSE(fs::exists(path + ".partial"));
  // A target that is a directory: the rename fails, the directory and no partial file remain.
  const std::string d = temp_path("atomic/dir");
  fs::create_directories(d);
  EXPECT_NE(error_of([&] { write_file_atomically(d, "x"); }).find(d), std::string::npos);
  EXPECT_TRUE(fs::is_directory(d));
  EXPECT_FALSE(fs::exists(d + ".partial"));
}

// A result file is written as NAME.partial first, in folders created as needed: a name the file
// system cannot hold (over NAME_MAX, 255 bytes here, with the suffix) is refused before the work,
// not after it.
TEST(Paths, OutputNamesTooLongForTheFileSystemAreRefused) {
  const std::string dir = temp_path("long_names");
  fs::create_directories(dir);
  ASSERT_EQ(::pathconf(dir.c_str(), _PC_NAME_MAX), 255) << "the expected messages assume 255";
  const std::string fits = dir + "/" + std::string(255 - 5 - 8, 'a') + ".json";  // 255 bytes
  EXPECT_EQ(error_of([&] { check_output_file("--summary", fits, {}); }), "");
  const std::string over = dir + "/" + std::string(255 - 5 - 8 + 1, 'a') + ".json";
  EXPECT_NE(error_of([&] { check_output_file("--summary", over, {}); })
                .find("is 256 bytes long while written ('.partial' appended); the file system "
                      "allows 255"),
            std::string::npos);
  const std::string folder = dir + "/" + std::string(300, 'b') + "/new/r.h5";  // to be created
  EXPECT_NE(error_of([&] {
              check_output_file("--out", folder, {});
            }).find("is 300 bytes long; the file system allows 255"),
            std::string::npos);
}
