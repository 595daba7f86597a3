// statecheck: the command line (docs/experiments.md, "Common interface"; the options and their
// checks: experiments/options.h).
//
//   statecheck <experiment> [--model NAME|FILE.json] [--tp N] [--seed N] [--device cpu|cuda]
//                           [--drive NAME] [--states FILE] [--quick] [--out FILE.h5]
//                           [--summary FILE.json] [--threads N] [experiment options]
//
// Exit status: 0 success; 1 a threshold failed (suite); 2 bad input or a failed run, with a
// one-line reason on stderr.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options/errors.hpp>

#include "core/io/interrupt_cleanup.h"
#include "core/util/error.h"
#include "experiments/experiment.h"
#include "experiments/options.h"

int main(int argc, char** argv) {
  // Line-buffered output: progress and partial results reach a log even if the run is killed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // An interrupted run removes its partial results and the folders it created for them.
  statecheck::install_interrupt_cleanup();
  std::string experiment;  // named in the out-of-memory messages
  try {
    const statecheck::CommandLine cl =
        statecheck::parse_command_line(std::vector<std::string>(argv, argv + argc));
    if (cl.help) {
      std::cout << statecheck::command_line_help() << std::endl;
      return 0;
    }
    experiment = cl.options.experiment;
    if (experiment.empty()) {
      std::cerr << statecheck::command_line_usage()
                << "\nstatecheck: no experiment given (see statecheck --help)" << std::endl;
      return 2;
    }
    for (const std::string& note : cl.notes) std::cerr << "statecheck: note: " << note << std::endl;
    return statecheck::run_experiment(cl.options);
  } catch (const boost::program_options::error& e) {
    std::cerr << "statecheck: " << statecheck::printable(e.what()) << " (see statecheck --help)"
              << std::endl;
    return 2;
  } catch (const statecheck::Error& e) {
    std::cerr << "statecheck: " << statecheck::printable(e.what()) << std::endl;
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "statecheck: out of memory running '" << experiment
              << "' (an input or option asks for more than this machine has)" << std::endl;
    return 2;
  } catch (const std::length_error&) {
    std::cerr << "statecheck: '" << experiment
              << "' was asked for an array larger than memory can address (check sizes in the "
                 "inputs and options)"
              << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "statecheck: " << statecheck::printable(e.what()) << std::endl;
    return 2;
  }
}
