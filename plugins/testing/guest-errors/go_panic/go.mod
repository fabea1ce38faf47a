module go_panic

go 1.21
