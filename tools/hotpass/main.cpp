// hotpass: the command-line front end. Subcommands are thin; the work is in the libraries.
#include <CLI/CLI.hpp>
#include <signal.h>

#include "commands.h"
#include "hotpass/core/log.h"

int main(int argc, char **argv) {
    // A parent that ignored SIGCHLD passes that on through exec; children would then be reaped
    // behind waitpid's back (builds, agent turns, executors), and their exit statuses lost.
    signal(SIGCHLD, SIG_DFL);
    CLI::App app{
        "hotpass keeps an LLM forward pass fast as models, hardware and traffic change.\n"
        "Start with `hotpass model init --preset tiny-llama --out m` and "
        "`hotpass generate --model m --tokens 1,2,3 -n 16`."};
    app.require_subcommand(1);
    app.set_version_flag("--version", "hotpass 0.1.0");
    std::string log_level = "warn";
    app.add_option("--log-level", log_level, "what the log shows on stderr")
        ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
        ->capture_default_str();
    app.parse_complete_callback([&] { hp::log_setup(log_level); });

    int exit_code = 0;
    hp::cli::add_model_commands(app, exit_code);
    hp::cli::add_generate_command(app, exit_code);
    hp::cli::add_executor_commands(app, exit_code);
#ifdef HOTPASS_HAVE_TRAFFIC
    hp::cli::add_traffic_commands(app, exit_code);
#endif
#ifdef HOTPASS_HAVE_CAMPAIGN
    hp::cli::add_campaign_commands(app, exit_code);
#endif
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        // --help and --version exit 0; every usage error (an unknown flag, a missing argument, a
        // value that does not parse) exits 2, as the commands' own usage errors do.
        return app.exit(e) == 0 ? 0 : 2;
    }
    return exit_code;
}
