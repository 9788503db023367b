"""The ``weir`` command: daemons, the local cluster, and client commands.

Exit codes: 0 success; 1 the job failed or was cancelled; 2 a user error (bad input,
unreachable cluster), printed as one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

# gRPC's C core logs failed TLS handshakes at INFO to stderr; the command says what failed in
# one line of its own. Set before anything imports grpc.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from weir.core.errors import JobExecutionError, UserError
from weir.core.ids import JobId
from weir.core.secrets import auth_token
from weir.core.tls import TlsFiles

if TYPE_CHECKING:
    from weir.client.cluster_client import JobMasterClient
    from weir.core.config import Configuration
    from weir.proto import checkpoint_pb2, jobmaster_pb2

EXIT_OK, EXIT_JOB_FAILED, EXIT_USER_ERROR = 0, 1, 2


def _options_epilog() -> str:
    import importlib

    from weir.core.config import OPTION_MODULES, Option

    lines = ["configuration (-D key=value, --conf weir.yaml, or the environment variable):"]
    for module_name in OPTION_MODULES:
        for value in vars(importlib.import_module(module_name)).values():
            if isinstance(value, Option):
                default = "" if value.default is None else f" (default {value.default})"
                lines.append(f"  {value.key}{default}  [{value.env_var}]")
    return "\n".join(lines)


def _conf_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--conf", help="YAML configuration file")
    p.add_argument("-D", dest="dynamic", action="append", default=[], metavar="KEY=VALUE",
                   help="set a configuration option (repeatable)")


def _client_args(p: argparse.ArgumentParser) -> None:
    _conf_args(p)
    p.add_argument("--jobmaster", metavar="HOST:PORT", help="JobMaster address")
    p.add_argument("--dir", help="directory of a local cluster (weir cluster start --dir)")


def _savepoint_type_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--type", choices=("canonical", "native"), default="canonical",
                   help="canonical (default): restores into either state backend at any "
                        "parallelism; native: the backend's own files (RocksDB SSTs), "
                        "copying those the latest checkpoint stored instead of uploading them")


def _run_options(p: argparse.ArgumentParser) -> None:
    _client_args(p)
    p.add_argument("--detached", action="store_true",
                   help="print the job id and return once the job is submitted")
    p.add_argument("-s", "--from-savepoint", metavar="PATH",
                   help="start from this savepoint or retained checkpoint (its directory or "
                        "_metadata; execution.state-recovery.path)")
    p.add_argument("--claim-mode", choices=("claim", "no-claim"),
                   help="no-claim (default): the snapshot stays the user's, untouched; "
                        "claim: the job owns it and deletes it once subsumed")
    p.add_argument("--allow-non-restored-state", action="store_true",
                   help="start even if the snapshot holds state of operators the job does "
                        "not have (that state is dropped)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="weir", description="weir: a distributed stream-processing engine.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    epilog = _options_epilog()
    jm = sub.add_parser("jobmaster", help="run a JobMaster in the foreground", epilog=epilog,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    _conf_args(jm)
    jm.add_argument("--info-file", help=argparse.SUPPRESS)
    jm.add_argument("--log-file", help="also log to this file")

    te = sub.add_parser("taskexecutor", help="run a TaskExecutor in the foreground",
                        epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    _conf_args(te)
    te.add_argument("--jobmaster", required=True, metavar="HOST:PORT")
    te.add_argument("--slots", type=int, help="task slots (taskmanager.numberOfTaskSlots)")
    te.add_argument("--info-file", help=argparse.SUPPRESS)
    te.add_argument("--log-file", help="also log to this file")

    service = sub.add_parser(
        "shuffle-service", help="run the external shuffle service in the foreground",
        description="Stores blocking result partitions of batch jobs, so they outlive the "
                    "TaskExecutors that produced them. Point TaskExecutors and the JobMaster "
                    "at it with -D shuffle-service-factory.class=shuffle.external.factory."
                    "ExternalShuffleServiceFactory -D shuffle-service.address=HOST:PORT.")
    _conf_args(service)
    service.add_argument("--dir", required=True, help="data directory for partitions")
    service.add_argument("--host", default="127.0.0.1")
    service.add_argument("--port", type=int, default=0, help="gRPC port (0: a free one)")
    service.add_argument("--info-file", help=argparse.SUPPRESS)
    service.add_argument("--log-file", help="also log to this file")

    cluster = sub.add_parser("cluster", help="manage a local cluster of daemon processes")
    csub = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    start = csub.add_parser("start", help="start a JobMaster and TaskExecutors in the background")
    _conf_args(start)
    start.add_argument("--taskexecutors", type=int, default=2)
    start.add_argument("--slots", type=int, default=2)
    start.add_argument("--dir", help="working directory (default ~/.weir/cluster)")
    start.add_argument(
        "--with-s3", action="store_true",
        help="also start an S3 server (SeaweedFS) on 127.0.0.1 with generated credentials, "
             "and default the daemons' state.checkpoints.dir to s3://weir/checkpoints on it")
    start.add_argument(
        "--restart-taskexecutors", action="store_true",
        help="start dead TaskExecutors again, with the same resource id (as a Kubernetes "
             "deployment restarts a pod)")
    start.add_argument(
        "--ha", action="store_true",
        help="high availability: keep submitted jobs and their latest checkpoint in DIR/ha "
             "(s3://<bucket>/ha with --with-s3; high-availability.storageDir overrides), "
             "give the JobMaster a fixed port and start it again when it dies: it recovers "
             "every running job from its latest checkpoint")
    start.add_argument(
        "--tls", action="store_true",
        help="mutual TLS between every process: generate a private CA and a certificate "
             "for this host into DIR/tls (clients using --dir DIR find them there)")
    st = csub.add_parser("status", help="show the local cluster")
    st.add_argument("--dir")
    st.add_argument("--json", action="store_true", help="print JSON for scripts")
    st.add_argument("-D", dest="dynamic", action="append", default=[], metavar="KEY=VALUE")
    supervise = csub.add_parser("supervise", help=argparse.SUPPRESS)
    supervise.add_argument("--dir")
    stop = csub.add_parser("stop", help="stop the local cluster")
    stop.add_argument("--dir")

    run = sub.add_parser(
        "run", help="run a job program against the cluster",
        usage="weir run [OPTIONS] job.py [OPTIONS] [--] [ARGS...]",
        description="weir's options may come before or right after the job file; the "
                    "program's arguments follow them. A weir option after a program "
                    "argument is refused as ambiguous; after `--` everything is the "
                    "program's.")
    _run_options(run)
    run.add_argument("job", help="the job program (a Python file)")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the program")

    staging = sub.add_parser(
        "staging", help="list or remove the Spark staging directories jobs left",
        description="Spark staging directories (from_spark()) under ROOT (default: "
                    "spark.staging.dir or its default): list shows each with its job and "
                    "state (running, preparing, retained, orphaned); clean deletes the "
                    "orphaned ones. The JobMaster says which jobs still run.")
    staging.add_argument("staging_command", choices=("list", "clean"))
    staging.add_argument("root", nargs="?", metavar="ROOT",
                         help="a directory or s3://bucket/prefix holding staging "
                              "directories, or one staging directory")
    _client_args(staging)
    lst = sub.add_parser("list", help="list jobs")
    _client_args(lst)
    status = sub.add_parser("status", help="show a job's tasks, records and backpressure")
    _client_args(status)
    status.add_argument("job_id", type=JobId)
    status.add_argument("--json", action="store_true", help="print JSON for scripts")
    checkpoints = sub.add_parser(
        "checkpoints", help="show a job's checkpoint history",
        description="Every recent checkpoint of a job: status, aligned or unaligned, "
                    "duration, sizes, alignment, failure reason and path (newest last).")
    _client_args(checkpoints)
    checkpoints.add_argument("job_id", type=JobId)
    checkpoints.add_argument("--json", action="store_true", help="print JSON for scripts")
    checkpoints.add_argument("--tasks", action="store_true",
                             help="add each subtask's part (sync, async, alignment, ...)")
    cancel = sub.add_parser("cancel", help="cancel a job")
    _client_args(cancel)
    cancel.add_argument("job_id", type=JobId)

    savepoint = sub.add_parser(
        "savepoint", help="take a savepoint of a running job, or dispose of one",
        usage="weir savepoint JOB_ID [TARGET_DIR] [--type canonical|native]\n"
              "       weir savepoint --dispose PATH",
        description="An aligned snapshot of the job that belongs to you: restore it with "
                    "`weir run -s PATH job.py`. The savepoint's directory is printed last. "
                    "Native savepoints of a job into one TARGET_DIR refer to the files the "
                    "previous one there holds: move that directory whole.")
    _client_args(savepoint)
    savepoint.add_argument("job_id", nargs="?", type=JobId)
    savepoint.add_argument("target", nargs="?", metavar="TARGET_DIR",
                           help="file:// or s3:// directory (default "
                                "execution.checkpointing.savepoint-dir)")
    _savepoint_type_arg(savepoint)
    savepoint.add_argument("--full", action="store_true",
                           help="native: upload every file, even those the latest "
                                "checkpoint or an earlier savepoint in TARGET_DIR stored")
    savepoint.add_argument("--dispose", metavar="PATH",
                           help="delete the savepoint at PATH (keeping the files later "
                                "savepoints in its directory refer to)")
    stop = sub.add_parser(
        "stop", help="stop a job with a savepoint",
        description="Periodic checkpoints pause, a savepoint is taken, sinks commit it and "
                    "the job ends FINISHED; the savepoint's directory is printed last. If "
                    "the savepoint fails, the job keeps running.")
    _client_args(stop)
    stop.add_argument("job_id", type=JobId)
    stop.add_argument("--savepoint-path", "-p", metavar="DIR",
                      help="target directory (default execution.checkpointing.savepoint-dir)")
    stop.add_argument("--drain", "-d", action="store_true",
                      help="first advance event time to the end: timers and windows fire")
    _savepoint_type_arg(stop)

    rescale = sub.add_parser(
        "rescale", help="change a running job's parallelism",
        description="A checkpoint is taken and the job is deployed again from it at the new "
                    "parallelism, keyed state split by key groups and operator state "
                    "redistributed; sources continue where they were. Prints the downtime.")
    _client_args(rescale)
    rescale.add_argument("job_id", type=JobId)
    rescale.add_argument("--parallelism", "-p", type=int, default=0,
                         help="the new parallelism of every operator running at the job's "
                              "parallelism")
    rescale.add_argument("--operator", action="append", default=[], metavar="UID=N",
                         help="the new parallelism of the operator with this uid (and its "
                              "chain); repeatable")
    update = sub.add_parser(
        "update", help="replace a running job's program, keeping its state",
        usage="weir update JOB_ID [OPTIONS] new_job.py [ARGS...]",
        description="Hot update: the new program's operators are matched to the running "
                    "job's by uid; a checkpoint is taken and the new program deployed from "
                    "it into the job's slots, restoring from local copies. Its sources keep "
                    "running from where they were (they are not prepared again). An update "
                    "whose state does not fit is refused and the job runs on untouched.")
    _client_args(update)
    update.add_argument("job_id", type=JobId)
    update.add_argument("--allow-non-restored-state", action="store_true",
                        help="drop the state of operators the new program does not have")
    update.add_argument("job", help="the new job program (a Python file)")
    update.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the program")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            return _main(sys.argv[1:] if argv is None else argv)
        finally:
            # Output is buffered when piped: a reader that went away shows here, inside the
            # try, instead of as "Exception ignored ... BrokenPipeError" when Python exits.
            sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`weir list | head -1`): not an error of ours. Point stdout at
        # /dev/null, or the interpreter's own flush at exit would fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            _split_program_args(argv, args)
        return _dispatch(args)
    except JobExecutionError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_JOB_FAILED
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return 130


def _split_program_args(argv: list[str], args: argparse.Namespace) -> None:
    """Take weir's options that directly follow the job file out of ``args.args`` (the
    README's ``weir run job.py --dir DIR ... ARGS``) and refuse one that follows a program
    argument.

    Unlike ``flink run``, which hands everything after the jar to the program, weir reads
    them: passing ``--dir D`` on to the program would submit to the default cluster while
    the user meant D. A weir option after a program argument is ambiguous, so it is refused
    in one line; after ``--`` everything is the program's, for programs that take an option
    named like one of weir's.
    """
    program = list(args.args)
    # argparse drops the "--" that separates the program's arguments: look at the raw argv.
    if not program or argv[len(argv) - len(program) - 1] == "--":
        return
    options = argparse.ArgumentParser(prog="weir run", add_help=False)
    _run_options(options)
    takes_value = {o: a.nargs != 0 for a in options._actions for o in a.option_strings}

    def weir_option(arg: str) -> str | None:
        name = arg.split("=", 1)[0]
        if name in takes_value:
            return name
        return "-D" if arg.startswith("-D") else None

    leading = 0
    while leading < len(program) and (name := weir_option(program[leading])) is not None:
        attached = "=" in program[leading] or (name == "-D" and program[leading] != "-D")
        leading += 2 if takes_value[name] and not attached else 1
    if leading:
        if leading > len(program):
            msg = f"'{program[-1]}' needs a value: `weir run {args.job} {program[-1]} VALUE`"
            raise UserError(msg)
        options.parse_args(program[:leading], namespace=args)
    program = program[leading:]
    if program[:1] == ["--"]:
        args.args = program[1:]
        return
    args.args = program
    unchecked = program.index("--") if "--" in program else len(program)
    for arg in program[:unchecked]:
        if weir_option(arg) is not None:
            msg = (f"'{arg}' follows the program's arguments, so it is unclear whether it is "
                   f"weir's or the program's: put weir's options before them (`weir run "
                   f"{args.job} {arg} ... ARGS`), or write `weir run {args.job} -- ARGS` to "
                   "hand everything after `--` to the program")
            raise UserError(msg)


def _dispatch(args: argparse.Namespace) -> int:
    from weir.cli import cluster, daemons
    from weir.core.config import Configuration

    if args.command == "jobmaster":
        conf = Configuration.load(args.conf, args.dynamic)
        return daemons.run_jobmaster(conf, args.info_file, args.log_file)
    if args.command == "taskexecutor":
        conf = Configuration.load(args.conf, args.dynamic)
        if args.slots is not None and args.slots < 1:
            msg = "--slots must be at least 1"
            raise UserError(msg)
        return daemons.run_taskexecutor(conf, args.jobmaster, args.slots, args.info_file,
                                        args.log_file)
    if args.command == "shuffle-service":
        conf = Configuration.load(args.conf, args.dynamic)
        return daemons.run_shuffle_service(conf, args.dir, args.host, args.port,
                                           args.info_file, args.log_file)
    if args.command == "cluster":
        directory = Path(args.dir) if args.dir else cluster.default_cluster_dir()
        if args.cluster_command == "start":
            if args.taskexecutors < 1 or args.slots < 1:
                msg = "--taskexecutors and --slots must be at least 1"
                raise UserError(msg)
            Configuration.load(args.conf, args.dynamic)  # validate before starting anything
            info = cluster.start(directory, args.taskexecutors, args.slots, args.dynamic,
                                 args.conf, with_s3=args.with_s3, tls=args.tls,
                                 restart_taskexecutors=args.restart_taskexecutors,
                                 ha=args.ha)
            _print_cluster(info)
            return EXIT_OK
        if args.cluster_command == "status":
            info = cluster.status(directory, args.dynamic)
            if args.json:
                print(json.dumps(info, indent=2))
            else:
                _print_cluster(info)
            return EXIT_OK
        if args.cluster_command == "supervise":
            from weir.cli import daemons, supervisor

            daemons.setup_logging(str(directory / "log" / "supervisor.log"))
            return supervisor.supervise(directory)
        pids = cluster.stop(directory)
        print(f"stopped {len(pids)} processes of the cluster in {directory}")
        return EXIT_OK
    return _client_command(args)


def _print_cluster(info: dict[str, Any]) -> None:
    jm = info["jobmaster"]
    print(f"cluster in {info['dir']}")
    restarted = f"  restarts {jm['restarts']}" if "restarts" in jm else ""
    print(f"  JobMaster     {jm['address']}  pid {jm['pid']}  metrics {jm['metrics_url']}"
          f"  REST {jm.get('rest_url') or '-'}"
          f"{restarted}")
    if info.get("high_availability"):
        print(f"  high availability: jobs and checkpoint pointers in {info['high_availability']}")
    for te in info["taskexecutors"]:
        state = "registered" if te.get("registered") else ("alive" if te["alive"] else "DEAD")
        slots = (f"slots {te['slots_free']}/{te['slots_total']} free"
                 if "slots_total" in te else "")
        print(f"  TaskExecutor  {te['resource_id']}  {te['address']}  pid {te['pid']}  "
              f"{state}  {slots}  metrics {te['metrics_url']}")
    s3 = info.get("s3")
    if s3 is not None:
        state = "alive" if s3["alive"] else "DEAD"
        print(f"  S3 (SeaweedFS) {s3['endpoint']}  pid {s3['pid']}  {state}  "
              f"checkpoints {s3['checkpoints']}  credentials {s3['credentials_file']}")
    if "error" in info:
        print(f"  ({info['error']})")


def resolve_jobmaster(args: argparse.Namespace, conf: Configuration) -> str:
    """--jobmaster, else --dir, else jobmaster.address, else the default local cluster."""
    from weir.cli import cluster
    from weir.core import options

    if args.jobmaster:
        return str(args.jobmaster)
    if args.dir:
        address = cluster.jobmaster_address(Path(args.dir))
        if address is None:
            msg = (
                f"no cluster is running in {args.dir}: start one with "
                f"`weir cluster start --dir {args.dir}`"
            )
            raise UserError(msg)
        return address
    configured = conf.get(options.JOBMASTER_ADDRESS)
    if configured:
        return str(configured)
    address = cluster.jobmaster_address(cluster.default_cluster_dir())
    if address is None:
        msg = (
            "no JobMaster to talk to: start a local cluster with `weir cluster "
            "start`, or pass --jobmaster HOST:PORT or --dir DIR"
        )
        raise UserError(msg)
    return address


def _client_command(args: argparse.Namespace) -> int:
    from weir.cli import cluster, show
    from weir.client.cluster_client import ClusterJobClient, JobMasterClient
    from weir.core import options
    from weir.core.config import Configuration

    if args.command == "run":
        args.dynamic = [*_recovery_pairs(args), *args.dynamic]
    conf = Configuration.load(args.conf, args.dynamic)
    address = resolve_jobmaster(args, conf)
    directory = _cluster_dir(args, conf)
    if directory is not None and (pairs := cluster.tls_pairs(Path(directory), conf)):
        # A cluster started with --tls: its certificate is this user's, found with it.
        conf = Configuration.load(args.conf, [*pairs, *args.dynamic])
    client = JobMasterClient(address, auth_token(conf),
                             conf.get(options.CLIENT_TIMEOUT), tls=TlsFiles.from_conf(conf))
    try:
        if args.command == "run":
            return _run_job(args, conf, address)
        if args.command == "list":
            show.print_jobs(client.list_jobs())
            return EXIT_OK
        if args.command == "staging":
            return _staging(args, conf, client, directory)
        if args.command == "status":
            details = client.job_details(args.job_id)
            if args.json:
                print(json.dumps(show.status_json(details), indent=2))
            else:
                show.print_status(details)
            return EXIT_OK
        if args.command == "checkpoints":
            history = client.checkpoints(args.job_id)
            if args.json:
                print(json.dumps(show.checkpoints_json(history, args.tasks), indent=2))
            else:
                show.print_checkpoints(history, args.tasks)
            return EXIT_OK
        if args.command == "savepoint":
            return _savepoint(client, args)
        if args.command == "stop":
            return _stop(client, args)
        if args.command == "rescale":
            change = client.rescale_job(args.job_id, args.parallelism,
                                        _operator_parallelism(args.operator))
            _print_change(args.job_id, change)
            return EXIT_OK
        if args.command == "update":
            return _run_job(args, conf, address, update=args.job_id)
        if args.command == "cancel":
            client.cancel_job(args.job_id)
            job = ClusterJobClient(client, args.job_id)
            try:
                job.wait(timeout=60)
            except JobExecutionError as err:
                print(f"job {args.job_id} {err.status.lower()}")
                return EXIT_OK
            print(f"job {args.job_id} had already finished")
            return EXIT_OK
    finally:
        client.close()
    return EXIT_USER_ERROR


def _staging(args: argparse.Namespace, conf: Configuration, client: JobMasterClient,
             cluster_dir: str | None) -> int:
    from weir.cli import staging
    from weir.client.cluster_client import job_status_name
    from weir.datastream.connectors.spark import staging_dir

    root = args.root or staging_dir(conf, cluster_dir)
    jobs = {s.job_id: job_status_name(s.status) for s in client.list_jobs()}
    roots = staging.find_roots(root, conf, jobs)
    if args.staging_command == "list":
        staging.list_roots(roots)
    else:
        staging.clean(root, roots, conf)
    return EXIT_OK


def _savepoint_format(args: argparse.Namespace) -> checkpoint_pb2.SavepointFormat:
    from weir.proto import checkpoint_pb2

    if args.type == "canonical":
        return checkpoint_pb2.SAVEPOINT_CANONICAL
    return checkpoint_pb2.SAVEPOINT_NATIVE_FULL if getattr(args, "full", False) \
        else checkpoint_pb2.SAVEPOINT_NATIVE


def _savepoint(client: JobMasterClient, args: argparse.Namespace) -> int:
    if args.dispose:
        if args.job_id:
            msg = "--dispose PATH takes no job id: `weir savepoint --dispose PATH`"
            raise UserError(msg)
        client.dispose_savepoint(args.dispose)
        print(f"disposed of savepoint {args.dispose}")
        return EXIT_OK
    if not args.job_id:
        msg = "name the job: `weir savepoint JOB_ID [TARGET_DIR]` (`weir list` shows them)"
        raise UserError(msg)
    if args.full and args.type != "native":
        msg = "--full applies to native savepoints: add --type native"
        raise UserError(msg)
    print(f"triggering a savepoint of job {args.job_id} ...", file=sys.stderr)
    print(client.trigger_savepoint(args.job_id, args.target or "", _savepoint_format(args)))
    return EXIT_OK


def _stop(client: JobMasterClient, args: argparse.Namespace) -> int:
    from weir.client.cluster_client import ClusterJobClient

    print(f"stopping job {args.job_id} with a savepoint ...", file=sys.stderr)
    path = client.trigger_savepoint(args.job_id, args.savepoint_path or "",
                                    _savepoint_format(args), terminate=True, drain=args.drain)
    try:
        ClusterJobClient(client, args.job_id).wait(timeout=120)
        print(f"job {args.job_id} finished", file=sys.stderr)
    except JobExecutionError as err:
        print(f"job {args.job_id} ended {err.status.lower()} after its savepoint",
              file=sys.stderr)
    except TimeoutError:
        print(f"job {args.job_id} did not end within 120 s of its savepoint (a task failed "
              "meanwhile and it runs again from the savepoint?): see `weir status "
              f"{args.job_id}`", file=sys.stderr)
    print(path)
    return EXIT_OK


def _operator_parallelism(pairs: list[str]) -> dict[str, int]:
    result = {}
    for pair in pairs:
        uid, _, value = pair.rpartition("=")
        if not uid or not value.isdigit():
            msg = f"--operator takes UID=N (an operator uid and a parallelism), not {pair!r}"
            raise UserError(msg)
        result[uid] = int(value)
    return result


def _print_change(job_id: JobId, change: jobmaster_pb2.JobChange) -> None:
    restarted = ", ".join(change.restarted_operators) or "none"
    print(f"job {job_id}: {change.kind} from checkpoint {change.checkpoint_id}; changed "
          f"operators: {restarted}", file=sys.stderr)
    print(f"downtime {change.downtime_ms} ms")


def _recovery_pairs(args: argparse.Namespace) -> list[str]:
    """``weir run``'s snapshot options as configuration (execution.state-recovery.*)."""
    pairs = []
    if args.from_savepoint:
        pairs.append(f"execution.state-recovery.path={args.from_savepoint}")
    if args.claim_mode:
        pairs.append("execution.state-recovery.claim-mode="
                     + args.claim_mode.upper().replace("-", "_"))
    if args.allow_non_restored_state:
        pairs.append("execution.state-recovery.ignore-unclaimed-state=true")
    if (args.claim_mode or args.allow_non_restored_state) and not args.from_savepoint:
        msg = "--claim-mode and --allow-non-restored-state go with -s/--from-savepoint PATH"
        raise UserError(msg)
    return pairs


def _run_job(args: argparse.Namespace, conf: Configuration, address: str,
             update: JobId | None = None) -> int:
    """Run a job program: it submits its job, or (``update``: a job id) replaces that
    running job's program."""
    from weir.core.execution import ExecutionContext, set_execution_context

    job_path = Path(args.job)
    if not job_path.is_file():
        msg = f"job file not found: {job_path}"
        raise UserError(msg)
    detached = bool(update) or args.detached
    context = ExecutionContext(address=address, token=auth_token(conf),
                               configuration=conf, detached=detached,
                               show_progress=not detached,
                               cluster_dir=_cluster_dir(args, conf), update_job_id=update,
                               allow_non_restored_state=bool(
                                   update and args.allow_non_restored_state))
    set_execution_context(context)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(job_path), *args.args]
    sys.path.insert(0, str(job_path.resolve().parent))
    started = time.monotonic()
    try:
        runpy.run_path(str(job_path), run_name="__main__")
    except (UserError, JobExecutionError, BrokenPipeError):
        raise
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if code:
            return code
    except Exception as err:  # the job program's own error: one line, pointing at its line
        msg = (
            f"the job file {job_path} raised {type(err).__name__}: {err}"
            f"{_job_line(err, job_path)}"
        )
        raise UserError(msg) from None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        set_execution_context(None)
    if not context.submitted:
        msg = (
            f"the job file {job_path} did not submit a job: call env.execute() "
            "or execute_and_collect()"
        )
        raise UserError(msg)
    if update:
        _print_change(update, context.change)
    elif args.detached:
        for job_id in context.submitted:
            print(job_id)
    else:
        elapsed = time.monotonic() - started
        print(f"job {', '.join(context.submitted)} finished in {elapsed:.1f} s",
              file=sys.stderr)
    return EXIT_OK


def _cluster_dir(args: argparse.Namespace, conf: Configuration) -> str | None:
    from weir.cli import cluster
    from weir.core import options

    if args.jobmaster:
        return None
    if args.dir:
        return str(args.dir)
    if conf.get(options.JOBMASTER_ADDRESS):
        return None
    return str(cluster.default_cluster_dir())


def _job_line(err: BaseException, job_path: Path) -> str:
    resolved = str(job_path.resolve())
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        if os.path.realpath(frame.filename) == resolved:
            return f" (line {frame.lineno}: {(frame.line or '').strip()})"
    return ""
