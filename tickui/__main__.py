from tickui.cli.main import main

main()
