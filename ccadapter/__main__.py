from ccadapter.entry import main

main()
